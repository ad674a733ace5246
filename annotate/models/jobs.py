"""Background jobs whose state lives in the database, so pages can poll progress.

Every kind of job (import, export, rescore, training run) changes state only through the
guarded methods below: `start` claims a pending job, `succeed` and `fail` end an active one,
each an UPDATE that matches only the state it leaves, so a redelivered task or a second
worker can never run a finished job again or end a job twice.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone


class JobState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


ACTIVE_STATES = (JobState.PENDING, JobState.RUNNING)


class JobQuerySet(models.QuerySet):
    def active(self) -> JobQuerySet:
        return self.filter(state__in=ACTIVE_STATES)


class Job(models.Model):
    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.PENDING, db_index=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    # Whether a redelivered task may pick up a job an earlier attempt left running: true
    # where the work is idempotent (keyed writes, a file rewritten whole).
    resumable: ClassVar[bool] = True
    # Columns set in the same UPDATE as the final state (a training run frees its lock).
    finished_updates: ClassVar[dict] = {}
    # What `done` and `total` count, for the progress partial.
    progress_unit: ClassVar[str] = "items"

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    @property
    def is_finished(self) -> bool:
        return self.state in (JobState.SUCCEEDED, JobState.FAILED)

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else (100 if self.state == JobState.SUCCEEDED else 0)

    def _rows(self) -> models.QuerySet:
        return type(self)._default_manager.filter(pk=self.pk)

    def start(self, **fields) -> bool:
        """Claim the job for this attempt (pending -> running, setting `fields` too).

        True when this attempt should do the work: it claimed the job, or the job was left
        running by an attempt that died and its kind is resumable. A finished job: False.
        """
        if self._rows().filter(state=JobState.PENDING).update(state=JobState.RUNNING, error="", **fields) == 1:
            self.state, self.error = JobState.RUNNING, ""
            for name, value in fields.items():
                setattr(self, name, value)
            return True
        self.refresh_from_db()
        if self.state != JobState.RUNNING or not self.resumable:
            return False
        if fields:  # A resumed attempt starts its progress afresh, as a claimed one does.
            self.record_progress(**fields)
            for name, value in fields.items():
                setattr(self, name, value)
        return True

    def succeed(self, **fields) -> bool:
        """End an active job as succeeded; False if it had already ended."""
        return self._finish(JobState.SUCCEEDED, **fields)

    def fail(self, error: str, **fields) -> bool:
        """End an active job as failed with its message; False if it had already ended."""
        return self._finish(JobState.FAILED, error=error[:5000], **fields)

    def _finish(self, state: str, **fields) -> bool:
        updates = {"state": state, "finished_at": timezone.now(), **self.finished_updates, **fields}
        if self._rows().filter(state__in=ACTIVE_STATES).update(**updates) != 1:
            return False
        for name, value in updates.items():
            setattr(self, name, value)
        return True

    def record_progress(self, **fields) -> None:
        """Progress columns (done, total, counts) of a running job; ignored once it ended."""
        self._rows().filter(state=JobState.RUNNING).update(**fields)

    @contextmanager
    def failure_recorded(self) -> Iterator[Job]:
        """The job's work: an exception anywhere in it ends the job failed, with its message."""
        try:
            yield self
        except Exception as error:
            self.fail(f"{type(error).__name__}: {error}")
            raise


class ImportJob(Job):
    path = models.CharField(max_length=500)
    original_name = models.CharField(max_length=300, blank=True)
    format = models.CharField(max_length=20, default="auto")
    split_mode = models.CharField(max_length=20, default="auto")  # annotate.splitting.SPLIT_MODES
    source = models.CharField(max_length=100, blank=True)
    atomic = models.BooleanField(default=False)
    report_path = models.CharField(max_length=500, blank=True)
    created = models.PositiveIntegerField(default=0)
    duplicates = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    # The new solutions as graded on import, and how many of them went into the queue.
    graded_right = models.PositiveIntegerField(default=0)
    graded_wrong = models.PositiveIntegerField(default=0)
    graded_unknown = models.PositiveIntegerField(default=0)
    queued = models.PositiveIntegerField(default=0)

    progress_unit = "lines"

    def __str__(self) -> str:
        return f"Import {self.pk} of {self.original_name or self.path}"


class ExportJob(Job):
    format = models.CharField(max_length=30, default="prm800k")
    options = models.JSONField(default=dict, blank=True)
    path = models.CharField(max_length=500, blank=True)
    lines = models.PositiveIntegerField(default=0)
    # What the export left out, by reason ({"give_up": 3, "unknown_grade": 1}): its summary.
    skipped = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"Export {self.pk} ({self.format})"

    @property
    def progress_unit(self) -> str:  # type: ignore[override]
        return "solutions" if self.format in ("processbench", "soft") else "annotations"
