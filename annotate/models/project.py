"""Each project's rules: how labeling works there and the campaign's policies, edited by its admins.

The environment (STEPWISE_QUEUE_SIZE, STEPWISE_SELECTION_SHARES, STEPWISE_PROMOTION_* ...) gives
the values a new project starts with; from then on the project's row is what holds.
"""
from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from annotate.models.projects import Project
from infra.memo import ProcessMemo

# Every labeling request reads its project's settings: a process keeps them, per project, until
# a change anywhere (infra/memo.py) or this long.
_memo: ProcessMemo["LabelingConfig"] = ProcessMemo(seconds=5.0)


def _queue_size() -> int:
    return settings.STEPWISE_QUEUE_SIZE


def _queue_per_problem() -> int:
    return settings.STEPWISE_QUEUE_PER_PROBLEM


def _selection_shares() -> dict[str, float]:
    return dict(settings.STEPWISE_SELECTION_SHARES)


def _promotion_min_gain() -> float:
    return settings.STEPWISE_PROMOTION_MIN_GAIN


def _promotion_min_solutions() -> int:
    return settings.STEPWISE_PROMOTION_MIN_SOLUTIONS


def _promotion_min_steps() -> int:
    return settings.STEPWISE_PROMOTION_MIN_STEPS


def _lease_seconds() -> int:
    return settings.STEPWISE_LEASE_SECONDS


class Assistance(models.TextChoices):
    """What the labeling page shows of the model's view (annotate/labeling/assistance.py)."""

    BLIND = "blind", "Blind: nothing of the model"
    SECOND_LOOK = "second_look", "Second look: ask once when the model disagrees with a rating"
    SUGGEST = "suggest", "Suggest: show the model's first-error guess from the start"


class LabelingConfig(models.Model):
    """A project's settings: one row per project, made with the environment's defaults on first read."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="labeling_config")

    stop_at_first_error = models.BooleanField(
        default=True, help_text="After a -1 the task is submitted as found_error (PRM800K phase 2)"
    )
    allow_human_completion = models.BooleanField(
        "written corrections", default=False,
        help_text="After a -1 the annotator may write the step as it should be (key w), exported as PRM800K's "
                  "human_completion; with stop at the first error off they go on from it (PRM800K phase 1)",
    )
    overlap_k = models.PositiveSmallIntegerField(default=1, help_text="Annotators per solution (queue slots)")
    qc_rate = models.FloatField(default=0.1, help_text="Share of served tasks that are gold items, per generation")
    screening_required = models.BooleanField(
        default=True, help_text="The screening set (generation -1), when there is one, must be passed first"
    )
    screening_pass_accuracy = models.FloatField(default=0.8, help_text="Step accuracy against gold to pass screening")
    lease_seconds = models.PositiveIntegerField(
        default=_lease_seconds, validators=[MinValueValidator(1)],
        help_text="How long a served task stays the annotator's without a heartbeat")
    idle_seconds = models.PositiveIntegerField(default=60, help_text="Inactivity after which time stops counting")
    assistance = models.CharField(
        max_length=20, choices=Assistance.choices, default=Assistance.BLIND,
        help_text="What annotators see of the current model's step scores; each rating keeps what was shown",
    )
    assistance_margin = models.FloatField(
        default=0.5, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Second look: asked when the model's P(step right) is further than this from the rating "
                  "(+1 and 0 read as 1, -1 as 0)",
    )

    rescreen_on_guideline_change = models.BooleanField(
        default=False, help_text="A new guideline version asks every annotator to pass the screening set again")
    # The campaign's policies (environment variables before projects: now the environment's
    # values are only a new project's starting point).
    queue_size = models.PositiveIntegerField(
        default=_queue_size, validators=[MinValueValidator(1)],
        help_text="Solutions queued per generation (before overlap)")
    queue_per_problem = models.PositiveIntegerField(
        default=_queue_per_problem, validators=[MinValueValidator(1)],
        help_text="At most this many queued solutions of one problem per generation")
    selection_shares = models.JSONField(
        default=_selection_shares,
        help_text="Share of the queue each selection fills after a rescore, e.g. {\"convincing_wrong\": 0.5, "
                  "\"random\": 0.5}")
    promotion_min_gain = models.FloatField(
        default=_promotion_min_gain, help_text="A new model is promoted when its gain's lower bound is above this")
    promotion_min_solutions = models.PositiveIntegerField(
        default=_promotion_min_solutions, validators=[MinValueValidator(1)],
        help_text="Held-out labeled solutions the promotion gate needs to decide")
    promotion_min_steps = models.PositiveIntegerField(
        default=_promotion_min_steps, validators=[MinValueValidator(1)],
        help_text="Held-out labeled steps the promotion gate needs to decide")

    class Meta:
        verbose_name = "project settings"
        verbose_name_plural = "project settings"

    def __str__(self) -> str:
        return f"Settings of {self.project}"

    @classmethod
    def of(cls, project: "Project | int | None") -> "LabelingConfig":
        """The project's settings, from this process's memo (infra/memo.py) while they are fresh.
        (None is refused: it is what the type checker reads a row's `project_id` as, though the
        column is never null.)"""
        if project is None:
            raise ValueError("settings of no project")
        project_id = project if isinstance(project, int) else project.pk
        return _memo.get(project_id, lambda: cls.objects.get_or_create(project_id=project_id)[0])

    @property
    def lease_duration(self) -> int:
        return self.lease_seconds


@receiver(post_save, sender=LabelingConfig)
@receiver(post_delete, sender=LabelingConfig)
def _forget_changed_config(**kwargs) -> None:
    # Now, and again once the change commits (a read in between memoized it uncommitted).
    _memo.forget()
    transaction.on_commit(_memo.forget)
