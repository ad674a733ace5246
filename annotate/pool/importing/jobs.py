"""Imports as background jobs (the admin upload page and the API): the file, the row, the run.

The job's state changes only through the shared lifecycle on ``Job`` (``start``,
``record_progress``, ``succeed``, ``fail``). The rules that follow: a finished job, succeeded
or failed, is never run again when its task is redelivered; a job left running by an
attempt that died is resumed, which is safe because the import finds by content hash what
the dead attempt wrote, and reports the lines it wrote as created, as they were; an exception
anywhere in the work ends the job failed with its message.

A job succeeds once its solutions are labelable: ``queueing.enqueue_imported`` queues them
(unscored, wrong answers first) in the current generation before the job is marked done.
"""
from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from annotate.labeling import queueing
from annotate.models import ImportJob, Project
from annotate.pool.importing.formats import check_format
from annotate.pool.importing.pipeline import import_pool
from annotate.pool.importing.report import ImportSummary
from steps.splitting import check_mode


def _uploads_folder() -> Path:
    return Path(settings.UPLOADS_DIR) / "imports"


def save_upload(*, chunks: Iterable[bytes], original_name: str) -> Path:
    """Store an uploaded file under UPLOADS_DIR/imports with a name nobody else has."""
    folder = _uploads_folder()
    folder.mkdir(parents=True, exist_ok=True)
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(original_name).stem)[:60] or "upload"
    fd, name = tempfile.mkstemp(dir=folder, prefix=f"{stem}-", suffix=".jsonl")
    with os.fdopen(fd, "wb") as handle:
        for chunk in chunks:
            handle.write(chunk)
    return Path(name)


def create_import_job(
    *, project: Project | None = None, path: Path, original_name: str = "", format: str = "auto",
    split_mode: str = "auto", source: str = "", atomic: bool = False, user=None,
) -> ImportJob:
    """An ImportJob row for a saved file, into `project`, queued for a worker once the transaction commits."""
    job = _new_job(project=project, path=str(path), original_name=original_name, format=format,
                   split_mode=split_mode, source=source, atomic=atomic,
                   report_path=str(path.with_name(path.stem + "-report.jsonl")), created_by=user)
    transaction.on_commit(job.send_task)
    return job


def _new_job(*, project: Project | None, format: str, split_mode: str, original_name: str, **fields) -> ImportJob:
    """The job's row, its format and split mode checked: an upload's and the command's alike."""
    check_format(format)
    return ImportJob.objects.create(project=Project.objects.given(project), format=format,
                                    split_mode=check_mode(split_mode), original_name=original_name[:300], **fields)


def run_import_job(*, job_id: int) -> ImportJob:
    """Run one ImportJob into its project, with its progress in the row; see the module docstring for redelivery."""
    job = ImportJob.objects.select_related("project").get(pk=job_id)
    if job.start():
        _run_started(job, queue=True)
    job.refresh_from_db()  # the row as it ended, also when another attempt ended it first
    return job


def import_here(*, project: Project | None = None, path: str | Path, format: str = "auto", source: str = "",
                atomic: bool = False, report_path: str = "", split_mode: str = "auto",
                queue: bool = True) -> tuple[ImportJob, ImportSummary]:
    """An import run in this process (the import_pool command), recorded as a job as an upload's
    is, so the imports page lists every import whichever way it came; its summary for the caller."""
    job = _new_job(project=project, path=str(path)[:500], original_name=Path(path).name, format=format,
                   split_mode=split_mode, source=source or "", atomic=atomic, report_path=report_path)
    job.start()
    summary = _run_started(job, queue=queue)
    job.refresh_from_db()
    return job, summary


def _run_started(job: ImportJob, *, queue: bool) -> ImportSummary:
    def progress(done: int, total: int, summary: ImportSummary) -> None:
        # Atomic imports run in one transaction: these updates show only at its end.
        job.record_progress(done=done, total=total, created=summary.created, duplicates=summary.duplicates,
                            errors=summary.errors)

    with job.failure_recorded():
        summary = import_pool(project=job.project, path=job.path, format=job.format, source=job.source or None,
                              atomic=job.atomic, report_path=job.report_path or None, progress=progress,
                              split_mode=job.split_mode, file_name=job.original_name or None,
                              written_since=job.created_at)
        counts = {"format": summary.format, "total": summary.lines, "done": summary.lines,
                  "created": summary.created, "duplicates": summary.duplicates, "errors": summary.errors,
                  "graded_right": summary.graded[True], "graded_wrong": summary.graded[False],
                  "graded_unknown": summary.graded[None]}
        if summary.rolled_back:
            job.fail(summary.describe(), **counts)
        else:
            queued = queueing.enqueue_imported(project=job.project, solution_ids=summary.solution_ids) if queue else 0
            job.succeed(error="", queued=queued, **counts)
    return summary


def finished_report(job: ImportJob) -> Path | None:
    """The finished job's report, only when it is really there and lies in the uploads folder's
    imports: a path edited in the database (or a link planted there) must not turn the download
    into a way to read any file the server can."""
    if not job.is_finished or not job.report_path:
        return None
    path = Path(job.report_path).resolve()
    if not path.is_relative_to(_uploads_folder().resolve()):
        return None
    return path if path.is_file() else None


def remove_expired_uploads(*, days: int) -> list[Path]:
    """Delete uploaded files and reports older than `days`, unless their job is active or finished since.

    Only files in UPLOADS_DIR/imports are considered, whatever a job row's paths say, and the
    job rows stay as history (their page then says the report is gone). Returns what was deleted.
    """
    cutoff = timezone.now() - dt.timedelta(days=days)
    kept_jobs = ImportJob.objects.filter(Q(finished_at__isnull=True) | Q(finished_at__gte=cutoff))
    kept = {Path(p).resolve() for p in kept_jobs.values_list("path", flat=True)}
    kept |= {Path(p).resolve() for p in kept_jobs.values_list("report_path", flat=True) if p}
    removed = []
    for path in _uploads_folder().glob("*"):
        if path.is_file() and path.resolve() not in kept and path.stat().st_mtime < cutoff.timestamp():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
