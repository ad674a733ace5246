"""Per-project labeling settings, edited by admins (one row)."""
from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from infra.memo import ProcessMemo

# Every labeling request reads the settings: a process keeps them this long (an admin's change
# reaches the other web processes within it).
_memo: ProcessMemo["LabelingConfig"] = ProcessMemo(seconds=5.0)


class Assistance(models.TextChoices):
    """What the labeling page shows of the model's view (annotate/labeling/assistance.py)."""

    BLIND = "blind", "Blind: nothing of the model"
    SECOND_LOOK = "second_look", "Second look: ask once when the model disagrees with a rating"
    SUGGEST = "suggest", "Suggest: show the model's first-error guess from the start"


class LabelingConfig(models.Model):
    """How labeling works in this project. A singleton: always row 1, made on first read."""

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
    lease_seconds = models.PositiveIntegerField(default=0, help_text="0: use STEPWISE_LEASE_SECONDS")
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

    class Meta:
        verbose_name = "labeling settings"
        verbose_name_plural = "labeling settings"

    def __str__(self) -> str:
        return "Labeling settings"

    @classmethod
    def get(cls) -> "LabelingConfig":
        """The settings row, from this process's memo (infra/memo.py) while it is fresh."""
        return _memo.get(1, lambda: cls.objects.get_or_create(pk=1)[0])

    @property
    def lease_duration(self) -> int:
        return self.lease_seconds or settings.STEPWISE_LEASE_SECONDS


@receiver(post_save, sender=LabelingConfig)
@receiver(post_delete, sender=LabelingConfig)
def _forget_changed_config(**kwargs) -> None:
    # Now, and again once the change commits (a read in between memoized it uncommitted).
    _memo.forget()
    transaction.on_commit(_memo.forget)
