"""Export files and jobs: written atomically, run by a worker through the shared job lifecycle.

A file is written to a hidden temporary file next to the destination and renamed into place
only once complete: a reader (or the download link) never sees a truncated export. A Parquet
or `datasets` export is a folder, staged the same way; named `*.zip` (as jobs name theirs, so
the download is one file) it is zipped into that file.
"""
from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from annotate.models import ExportJob, Project
from annotate.pool.exporting import containers
from annotate.pool.exporting.formats import check_format
from annotate.pool.exporting.formats.base import ExportTally
from annotate.pool.exporting.options import CHUNK_SIZE, ExportOptions
from annotate.pool.exporting.rows import count_inputs, iter_jsonl
from jobs.states import JobState


def write_export(
    *,
    project: Project | None = None,
    path: Path | str,
    format: str,
    options: ExportOptions,
    on_progress: Callable[[int], None] | None = None,
    progress_every: int = CHUNK_SIZE,
    tally: ExportTally | None = None,
) -> int:
    """Write the project's export to `path` atomically; return the number of lines written.

    `tally`, when given, counts the annotations (or solutions) read and those left out.
    """
    project = Project.objects.given(project)
    path = Path(path)
    check_format(format)
    path.parent.mkdir(parents=True, exist_ok=True)
    if options.container != "jsonl":
        return _write_dataset(project=project, path=path, format=format, options=options, on_progress=on_progress,
                              progress_every=progress_every, tally=tally or ExportTally())
    fd, temp_name = _create_part_file(path)
    lines = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8", buffering=1 << 20) as out:
            for line in iter_jsonl(project=project, format=format, options=options, tally=tally):
                out.write(line)
                lines += 1
                if on_progress and lines % progress_every == 0:
                    on_progress(lines)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    if on_progress:
        on_progress(lines)
    return lines


def _create_part_file(path: Path) -> tuple[int, str]:
    """A new hidden file next to `path`, opened for writing: (descriptor, name).

    Not `tempfile.mkstemp`: its files are 0600, so the renamed export would be unreadable to the
    group and others where a Parquet export (written by plain `open`) is not. Created 0666 here,
    the process umask takes off what it takes off any new file. Same folder as the destination,
    so the final rename never crosses file systems.
    """
    while True:
        name = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.part")
        try:
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), name
        except FileExistsError:  # another writer's part file has that name: draw another
            continue


def _write_dataset(*, project: Project, path: Path, format: str, options: ExportOptions, on_progress,
                   progress_every: int, tally: ExportTally) -> int:
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part"))
    rows = 0

    def on_row() -> None:
        nonlocal rows
        rows += 1
        if on_progress and rows % progress_every == 0:
            on_progress(rows)

    try:
        folder = staging / "dataset"
        folder.mkdir()
        count = containers.write_dataset_folder(project=project, folder=folder, format=format,
                                                container=options.container, options=options, tally=tally,
                                                on_row=on_row)
        if path.suffix == ".zip":
            containers.zip_folder(folder=folder, path=path, top=path.stem)
        else:
            _replace_folder(folder, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if on_progress:
        on_progress(count)
    return count


def _replace_folder(folder: Path, path: Path) -> None:
    """Put `folder` at `path`; an earlier export there is moved aside first, then removed."""
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{path} is a file; a {folder.name} export is a folder (or name it .zip)")
    old = folder.parent / "old"
    if path.exists():
        path.rename(old)
    folder.rename(path)


def export_path(job: ExportJob) -> Path:
    return Path(settings.EXPORTS_DIR) / f"export-{job.pk}-{job.format}{_suffix(job)}"


def download_name(job: ExportJob) -> str:
    stamp = (job.finished_at or job.created_at or timezone.now()).strftime("%Y%m%d-%H%M%S")
    return f"stepwise-{job.format}-{stamp}{_suffix(job)}"


def _suffix(job: ExportJob) -> str:
    container = (job.options or {}).get("container") or "jsonl"
    return ".jsonl" if container == "jsonl" else f"-{container}.zip"


def create_export_job(*, project: Project | None = None, format: str, options: ExportOptions, user=None) -> ExportJob:
    """An ExportJob row for the project's labels, queued for a worker once the transaction commits."""
    project = Project.objects.given(project)
    job = ExportJob.objects.create(project=project, format=check_format(format), options=options.to_dict(),
                                   created_by=user)
    transaction.on_commit(job.send_task)
    return job


def run_export_job(*, job_id: int) -> ExportJob:
    """Run one ExportJob, of its project only: count, write with progress in the row, end it succeeded or failed.

    Progress counts what is read (annotations, or solutions for per-solution formats); the
    finished row also holds the lines written, what was left out, by reason (`skipped`), and
    what the export says of its lines (`report`: where PRM800K's `total_time` came from).

    A finished job, failed or succeeded, is left alone on redelivery; a job an attempt left
    running is run again, rewriting its own file whole.
    """
    job = ExportJob.objects.select_related("project").get(pk=job_id)
    if not job.start(done=0):
        return job
    with job.failure_recorded():
        options = ExportOptions.from_dict(job.options)
        total = count_inputs(project=job.project, format=job.format, options=options)
        job.record_progress(total=total)
        path = export_path(job)
        tally = ExportTally()
        lines = write_export(project=job.project, path=path, format=job.format, options=options, tally=tally,
                             on_progress=lambda _lines: job.record_progress(done=tally.read))
        job.succeed(path=str(path), lines=lines, done=tally.read, total=max(total, tally.read),
                    skipped=dict(sorted(tally.skipped.items())), report=tally.report())
    return job


def finished_file(job: ExportJob) -> Path | None:
    """The job's file, only when the job succeeded, the file is really there, and it lies in
    the exports folder: a path edited in the database (or a link planted in the folder) must
    not turn the download into a way to read any file the server can."""
    if job.state != JobState.SUCCEEDED or not job.path:
        return None
    path = Path(job.path).resolve()
    if not path.is_relative_to(Path(settings.EXPORTS_DIR).resolve()):
        return None
    return path if path.is_file() else None
