"""Reviewer corrections, kept as history: the annotator's rating is never lost."""
from django.conf import settings
from django.db import models

from annotate.models.labels import Completion, StepLabel
from steps import ratings


class RatingOverride(models.Model):
    """One change of a step's verdict by a reviewer.

    The rating changed is the one carrying the step's verdict: that of `completion`, or,
    when the annotator wrote the step (`completion` is None), the human completion's.
    """

    step_label = models.ForeignKey(StepLabel, on_delete=models.CASCADE, related_name="overrides")
    completion = models.ForeignKey(
        Completion, null=True, blank=True, on_delete=models.CASCADE, related_name="overrides",
        help_text="The completion whose rating changed; empty for the step's human completion",
    )
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    previous_rating = models.SmallIntegerField(null=True, blank=True, choices=ratings.CHOICES)
    new_rating = models.SmallIntegerField(null=True, blank=True, choices=ratings.CHOICES)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        target = f"completion {self.completion_id}" if self.completion_id else "the human completion"
        return f"Override of step label {self.step_label_id} ({target}): {self.previous_rating} -> {self.new_rating}"
