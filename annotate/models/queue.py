"""What annotators are served next, and why."""
from django.conf import settings
from django.db import models

from annotate.models.pool import Solution
from annotate.models.projects import project_column


class GenerationQuerySet(models.QuerySet):
    def current_number(self) -> int:
        """The generation new work is served in: the highest one, 0 before any model."""
        return self.number_of(list(self.current_number_query()))

    def current_number_query(self) -> models.QuerySet:
        """current_number's query, one row of (number,) or none: a claim compiles it once."""
        return self.filter(number__gte=0).order_by("-number").values_list("number")[:1]

    @staticmethod
    def number_of(rows: list) -> int:
        """The current generation's number from current_number_query's rows."""
        return rows[0][0] if rows else 0


class Generation(models.Model):
    """A period of labeling under one selection model. -1 is the screening set."""

    SCREENING = -1

    project = project_column(db_index=False)  # unique_generation_number starts with it
    number = models.IntegerField()
    model_version_name = models.CharField(max_length=200, blank=True)
    note = models.TextField(blank=True)
    started_at = models.DateTimeField(auto_now_add=True)

    objects = GenerationQuerySet.as_manager()

    class Meta:
        ordering = ["-number"]
        constraints = [models.UniqueConstraint(fields=["project", "number"], name="unique_generation_number")]

    def __str__(self) -> str:
        return f"Generation {self.number}"


class QueueItem(models.Model):
    """One slot of labeling work on a solution in a generation.

    Overlap of K annotators is K items for one solution (slot 0..K-1), written by
    `queueing.enqueue` with the priority, reason and score selection (in scoring) handed over.
    """

    class Status(models.TextChoices):
        AVAILABLE = "available"
        LEASED = "leased"
        DONE = "done"
        RETIRED = "retired"

    class Reason(models.TextChoices):
        """Why an item is in the queue: the one list of reasons, for the column's choices and every writer.

        Two sides write reasons: the labeling side (the order before any model, fresh imports,
        the screening set) and selection in scoring (after each rescore). The list lives on the
        column because the labeling app may not depend on the scoring app and both must read one
        definition; scoring owns what its reasons mean (their tie-breaking order, which need an
        ensemble, the shares that mix them: scoring/rescoring/selection.py), and the shares
        setting is checked against it. The labeling side's values are sentences, as stored
        before the choices were.
        """

        # Selection, after a rescore (scoring/rescoring/selection.py says what each ranks).
        CONVINCING_WRONG = "convincing_wrong", "convincing wrong answer"
        CONVINCING = "convincing", "convincing"
        UNCERTAIN = "uncertain", "uncertain"
        RANDOM = "random", "random"
        DISAGREEMENT = "disagreement", "the ensemble disagrees on a step"
        FIRST_ERROR_DISAGREEMENT = "first_error_disagreement", "the ensemble disagrees on the first error"
        UNCERTAIN_CONVINCING_WRONG = "uncertain_convincing_wrong", "wrong answer some plausible head finds convincing"
        ROLLOUT_DISAGREEMENT = "rollout_disagreement", "rollouts and the model disagree"
        SOURCES_DISAGREE = "sources_disagree", "the judge, rollouts and the model disagree on a step"
        # The labeling side: before any model, imported since the last rescore, the screening set.
        DEFAULT = "default order", "default order"
        IMPORTED = "imported, not scored yet", "imported, not scored yet"
        IMPORTED_WRONG = "imported, wrong answer, not scored yet", "imported, wrong answer, not scored yet"
        SCREENING = "screening", "screening"

    # The solution's project, on the row: a claim picks the best available item of one project
    # from the (project, status, -priority, id) index.
    project = project_column(db_index=False)
    # Both looked up through an index that starts with them (Meta; tests/config/test_schema.py).
    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="queue_items", db_index=False)
    generation = models.IntegerField(db_index=True)
    slot = models.PositiveSmallIntegerField(default=0)
    priority = models.FloatField(default=0.0, db_index=True)
    reason = models.CharField(max_length=100, blank=True, choices=Reason.choices)
    model_version_name = models.CharField(max_length=200, blank=True)
    score_at_selection = models.FloatField(null=True, blank=True)
    is_quality_control = models.BooleanField(default=False)
    is_initial_screening = models.BooleanField(default=False)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.AVAILABLE)
    leased_to = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="leases"
    )
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["solution", "generation", "slot"], name="unique_queue_slot"),
        ]
        indexes = [models.Index(fields=["project", "status", "-priority", "id"], name="queue_claim_order")]

    def __str__(self) -> str:
        return f"Queue item {self.pk} ({self.reason}) for solution {self.solution_id}"
