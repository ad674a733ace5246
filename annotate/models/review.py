"""Reviewer corrections, kept as history: the annotator's rating is never lost."""
from django.conf import settings
from django.db import models

from .labels import Completion


class RatingOverride(models.Model):
    completion = models.ForeignKey(Completion, on_delete=models.CASCADE, related_name="overrides")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    previous_rating = models.SmallIntegerField(null=True, blank=True)
    new_rating = models.SmallIntegerField(null=True, blank=True)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"Override of completion {self.completion_id}: {self.previous_rating} -> {self.new_rating}"
