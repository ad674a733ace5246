"""A job's states: every job kind, and a held chunk's first two (pending, running), use these words."""
from django.db import models


class JobState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_STATES = (JobState.PENDING, JobState.RUNNING)
FINISHED_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
