"""Per-project labeling settings, edited by admins (one row)."""
from django.conf import settings
from django.db import models


class LabelingConfig(models.Model):
    """How labeling works in this project. A singleton: always row 1, made on first read."""

    stop_at_first_error = models.BooleanField(
        default=True, help_text="After a -1 the task is submitted as found_error (PRM800K phase 2)"
    )
    allow_human_completion = models.BooleanField(
        default=False, help_text="After a -1 the annotator may write the corrected step"
    )
    overlap_k = models.PositiveSmallIntegerField(default=1, help_text="Annotators per solution (queue slots)")
    qc_rate = models.FloatField(default=0.1, help_text="Share of served tasks that are gold items, per generation")
    screening_required = models.BooleanField(
        default=True, help_text="The screening set (generation -1), when there is one, must be passed first"
    )
    screening_pass_accuracy = models.FloatField(default=0.8, help_text="Step accuracy against gold to pass screening")
    lease_seconds = models.PositiveIntegerField(default=0, help_text="0: use STEPWISE_LEASE_SECONDS")
    idle_seconds = models.PositiveIntegerField(default=60, help_text="Inactivity after which time stops counting")

    class Meta:
        verbose_name = "labeling settings"
        verbose_name_plural = "labeling settings"

    def __str__(self) -> str:
        return "Labeling settings"

    @classmethod
    def get(cls) -> "LabelingConfig":
        config, _ = cls.objects.get_or_create(pk=1)
        return config

    @property
    def lease_duration(self) -> int:
        return self.lease_seconds or settings.STEPWISE_LEASE_SECONDS
