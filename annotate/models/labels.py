"""Human labels, in PRM800K's shape: per step a list of rated completions."""
from django.conf import settings
from django.db import models

from annotate.models.pool import Solution
from annotate.models.projects import project_column
from steps import ratings


class FinishReason(models.TextChoices):
    SOLUTION = "solution"
    FOUND_ERROR = "found_error"
    GIVE_UP = "give_up"
    BAD_PROBLEM = "bad_problem"


class AnnotationQuerySet(models.QuerySet):
    """Which annotations count for what: the one place these filters are spelled."""

    def submitted(self) -> "AnnotationQuerySet":
        return self.filter(status=Annotation.Status.SUBMITTED)

    def in_progress(self) -> "AnnotationQuerySet":
        return self.filter(status=Annotation.Status.IN_PROGRESS)

    def trainable(self) -> "AnnotationQuerySet":
        """Submitted labels a model may learn from: a bad problem says nothing about its steps."""
        return self.submitted().exclude(finish_reason=FinishReason.BAD_PROBLEM)


class Annotation(models.Model):
    """One annotator's labels of one solution (one PRM800K line)."""

    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress"
        SUBMITTED = "submitted"

    # The solution's project, on the row: exports and the gold count of a claim select by it.
    project = project_column()
    # Both looked up through an index that starts with them (Meta; tests/config/test_schema.py).
    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="annotations", db_index=False)
    # Local annotators have a user; labels imported from PRM800K keep only its labeler id.
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="annotations",
        db_index=False,
    )
    labeler = models.CharField(max_length=100, db_index=True, help_text="PRM800K `labeler` id")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.IN_PROGRESS, db_index=True)
    finish_reason = models.CharField(max_length=20, choices=FinishReason.choices, null=True, blank=True)
    finish_note = models.TextField(blank=True, help_text="Reason given for give_up / bad_problem")
    total_time_ms = models.PositiveBigIntegerField(null=True, blank=True)
    generation = models.IntegerField(null=True, blank=True, db_index=True)
    is_quality_control = models.BooleanField(default=False)
    is_initial_screening = models.BooleanField(default=False)
    # The project's guideline version when the annotation was begun (null for imported labels).
    guideline_version = models.PositiveIntegerField(null=True, blank=True)
    # The queue item it was served from: its score at selection is exported as
    # `pre_generated_verifier_score`. Null for imported labels.
    queue_item = models.ForeignKey(
        "annotate.QueueItem", null=True, blank=True, on_delete=models.SET_NULL, related_name="annotations"
    )
    # PRM800K `timestamp`: when the label was made (kept verbatim for imported lines).
    timestamp = models.DateTimeField(null=True, blank=True)
    # What the line's `question` held beyond the pool's fields, for exact round trips.
    question_extra = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = AnnotationQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["solution", "labeler"], name="one_annotation_per_labeler"),
        ]
        # "Has this annotator seen this solution?" is asked of every candidate at each claim:
        # one index probe, however many tasks the annotator has done.
        indexes = [
            models.Index(fields=["annotator", "solution"], name="annotation_annotator_solution"),
            # "Is gold due?" counts the annotator's gold and other tasks in the generation at each
            # claim under gold (queueing._qc_due): from this index alone, not the table's rows.
            models.Index(fields=["annotator", "project", "generation", "is_quality_control"],
                         name="annotation_annotator_gen"),
        ]

    def __str__(self) -> str:
        return f"Annotation {self.pk} by {self.labeler} of solution {self.solution_id}"

    @property
    def is_submitted(self) -> bool:
        return self.status == Annotation.Status.SUBMITTED


class ScreeningResult(models.Model):
    """An annotator's screening set, decided once they had submitted all of it: passed or failed.

    A decision, like a test's mark: it stands while the set or its gold labels change later,
    until an admin resets the annotator's screening (annotate.labeling.quality.reset_screening). Every
    claim asks for it, so it is one row read, not the set's agreement computed again.
    """

    project = project_column(db_index=False)  # one_screening_result starts with it
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                  related_name="screening_results")
    passed = models.BooleanField()
    step_accuracy = models.FloatField(null=True, blank=True, help_text="Agreement with gold when decided")
    items = models.PositiveIntegerField(help_text="Screening items the decision was made on")
    decided_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # Passing in one project passes nothing in another.
        constraints = [models.UniqueConstraint(fields=["project", "annotator"], name="one_screening_result")]

    def __str__(self) -> str:
        return f"Screening of user {self.annotator_id}: {'passed' if self.passed else 'failed'}"


class StepLabel(models.Model):
    """PRM800K `label.steps[i]`: the completions shown at step i and which was continued."""

    annotation = models.ForeignKey(Annotation, on_delete=models.CASCADE, related_name="step_labels",
                                   db_index=False)  # unique_step_label starts with it
    index = models.PositiveIntegerField()
    chosen_completion = models.IntegerField(null=True, blank=True)
    human_completion = models.JSONField(null=True, blank=True)
    time_ms = models.PositiveBigIntegerField(null=True, blank=True, help_text="Active time on this step")
    # What the annotator saw of the model when rating this step (annotate.labeling.assistance):
    # null when nothing (a blind project, an imported line).
    assistance = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["annotation", "index"]
        constraints = [models.UniqueConstraint(fields=["annotation", "index"], name="unique_step_label")]

    def __str__(self) -> str:
        return f"Step {self.index} of annotation {self.annotation_id}"


class Completion(models.Model):
    """One candidate text for a step with its rating (steps.ratings: -1, 0, +1; None unrated) and flag."""

    step_label = models.ForeignKey(StepLabel, on_delete=models.CASCADE, related_name="completions",
                                   db_index=False)  # unique_completion starts with it
    index = models.PositiveIntegerField()
    text = models.TextField()
    rating = models.SmallIntegerField(null=True, blank=True, choices=ratings.CHOICES)
    flagged = models.BooleanField(null=True, blank=True)
    extra = models.JSONField(default=dict, blank=True, help_text="Unknown keys kept for round trips")

    class Meta:
        ordering = ["step_label", "index"]
        constraints = [
            models.UniqueConstraint(fields=["step_label", "index"], name="unique_completion"),
            models.CheckConstraint(
                condition=models.Q(rating__in=[int(r) for r in ratings.Rating]) | models.Q(rating__isnull=True),
                name="rating_in_range",
            ),
        ]

    def __str__(self) -> str:
        return f"Completion {self.index} of step label {self.step_label_id}"
