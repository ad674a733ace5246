"""Background jobs whose state lives in the database, so pages can poll progress."""
from django.conf import settings
from django.db import models


class JobState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Job(models.Model):
    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.PENDING, db_index=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    @property
    def is_finished(self) -> bool:
        return self.state in (JobState.SUCCEEDED, JobState.FAILED)

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else (100 if self.state == JobState.SUCCEEDED else 0)


class ImportJob(Job):
    path = models.CharField(max_length=500)
    original_name = models.CharField(max_length=300, blank=True)
    format = models.CharField(max_length=20, default="auto")
    source = models.CharField(max_length=100, blank=True)
    atomic = models.BooleanField(default=False)
    report_path = models.CharField(max_length=500, blank=True)
    created = models.PositiveIntegerField(default=0)
    duplicates = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)


class ExportJob(Job):
    format = models.CharField(max_length=30, default="prm800k")
    options = models.JSONField(default=dict, blank=True)
    path = models.CharField(max_length=500, blank=True)
    lines = models.PositiveIntegerField(default=0)
