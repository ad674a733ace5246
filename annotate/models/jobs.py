"""The labeling side's job kinds: imports and exports. Their lifecycle, heartbeats and
recovery are the ground floor's (`jobs`); each kind registers itself by subclassing `Job`."""
from __future__ import annotations

from typing import ClassVar

from django.db import models

from annotate.models.projects import project_column
from jobs.models import Job


class ImportJob(Job):
    project = project_column()
    path = models.CharField(max_length=500)
    original_name = models.CharField(max_length=300, blank=True)
    format = models.CharField(max_length=20, default="auto")
    split_mode = models.CharField(max_length=20, default="auto")  # steps.splitting.SPLIT_MODES
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
    task_name = "annotate.import_pool_task"

    def __str__(self) -> str:
        return f"Import {self.pk} of {self.original_name or self.path}"


class ExportJob(Job):
    project = project_column()
    format = models.CharField(max_length=30, default="prm800k")
    options = models.JSONField(default=dict, blank=True)
    path = models.CharField(max_length=500, blank=True)
    lines = models.PositiveIntegerField(default=0)
    # What the export left out, by reason ({"give_up": 3, "unknown_grade": 1}): its summary.
    skipped = models.JSONField(default=dict, blank=True)
    # What it says of the lines it wrote: {"total_time": {"active": 40, "claim_to_submit": 2}}
    # (PRM800K: where each line's total_time came from, annotate.pool.prm800k.total_time).
    report = models.JSONField(default=dict, blank=True)

    task_name = "annotate.export_task"
    # What each format's progress counts ("annotations", or "solutions" for a format with a row per
    # solution): filled by the export format registry (annotate.pool.exporting.formats), above the models.
    units_by_format: ClassVar[dict[str, str]] = {}

    def __str__(self) -> str:
        return f"Export {self.pk} ({self.format})"

    @property
    def progress_unit(self) -> str:  # type: ignore[override]
        return self.units_by_format.get(self.format, "annotations")
