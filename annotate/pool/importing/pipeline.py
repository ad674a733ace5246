"""`import_pool`: one JSONL file through the stages, in order (the package docstring says how)."""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction

from annotate.models import Project
from annotate.pool.importing.formats import (
    Parser,
    Record,
    check_format,
    parser_for,
)
from annotate.pool.importing.reading import BadJson, count_lines, detect_file_format, file_digest, read_jsonl, split_of
from annotate.pool.importing.report import ImportSummary, Outcome, Report
from annotate.pool.importing.statistics import PlannerStatistics
from annotate.pool.importing.writing import CONNECTION_FAULTS, GradingBudget, SourceFile, write_batch
from annotate.pool.prm800k import LineError
from steps.splitting import check_mode

BATCH_SIZE = 1000

Progress = Callable[[int, int, ImportSummary], None]


class _Rollback(Exception):
    pass


def import_pool(
    *,
    project: Project | None = None,
    path: str | Path,
    format: str = "auto",
    source: str | None = None,
    atomic: bool = False,
    report_path: str | Path | None = None,
    progress: Progress | None = None,
    split_mode: str = "auto",  # a SplitMode (or an old alias): checked here
    batch_size: int = BATCH_SIZE,
    file_name: str | None = None,
    grading_budget: float | None = None,
    written_since: dt.datetime | None = None,
) -> ImportSummary:
    """Import one JSONL file into the project's pool; see the module docstring.

    `file_name` is the name its sample lines keep (default: the path's), e.g. an upload's own name.
    `grading_budget` is the seconds all its lines may spend being graded (default:
    STEPWISE_IMPORT_GRADING_BUDGET); lines after that are imported ungraded. `written_since`:
    when the job began, so that the lines an earlier attempt of it wrote count as created
    (writing.SourceFile).
    """
    project = Project.objects.given(project)
    check_format(format)
    split_mode = check_mode(split_mode)
    if source is not None and len(source) > 100:
        raise ValueError("source is longer than 100 characters")
    path = Path(path)
    if format == "auto":
        format = detect_file_format(path) or "auto"
    summary = ImportSummary(path=str(path), format=format, total=count_lines(path))
    parse = parser_for(format, source=source, split=split_of(path), split_mode=split_mode)
    source_file = SourceFile(digest=file_digest(path), name=file_name or path.name, written_since=written_since)
    budget = GradingBudget(settings.STEPWISE_IMPORT_GRADING_BUDGET if grading_budget is None else grading_budget)
    report = Report(report_path)
    try:
        if atomic:
            try:
                with transaction.atomic():
                    _import_lines(path, parse, summary, report, progress, batch_size, source_file, budget, project)
                    if summary.errors:
                        raise _Rollback
            except _Rollback:
                summary.rolled_back = True
                summary.forget_written()
        else:
            _import_lines(path, parse, summary, report, progress, batch_size, source_file, budget, project)
        summary.ungraded = budget.ungraded
        report.finish(summary)
    except CONNECTION_FAULTS:
        # No line's fault, and nothing is reported. Leaving the batch's transaction, Django may
        # already have connected again; dropping that connection tells the job the first one was
        # lost (Job.failure_recorded), so it is given back for its task to retry, not failed.
        if not connection.in_atomic_block:
            connection.close()
        raise
    finally:
        report.close()
    return summary


def _import_lines(path: Path, parse: Parser, summary: ImportSummary, report: Report, progress: Progress | None,
                  batch_size: int, source_file: SourceFile, budget: GradingBudget, project: Project) -> None:
    # Lines in input order, parsed (Record) or already failed (Outcome), so that the
    # report keeps the file's order although only the records go to the database.
    pending: list[Record | Outcome] = []
    statistics = PlannerStatistics()
    for line_no, obj in read_jsonl(path):
        summary.lines += 1
        try:
            if isinstance(obj, BadJson):
                raise LineError("line", obj.message)
            pending.append(parse(obj, line_no))
        except (LineError, ValueError) as error:
            pending.append(Outcome(line_no=line_no, status="error", error=str(error)))
        if len(pending) >= batch_size:
            _flush(pending, summary, report, progress, source_file, budget, project)
            statistics.wrote(len(pending))
            pending = []
    _flush(pending, summary, report, progress, source_file, budget, project)


def _flush(pending: list[Record | Outcome], summary: ImportSummary, report: Report, progress: Progress | None,
           source_file: SourceFile, budget: GradingBudget, project: Project) -> None:
    records = [item for item in pending if isinstance(item, Record)]
    written = iter(write_batch(records, project=project, source_file=source_file, budget=budget) if records else [])
    for item in pending:
        outcome = next(written) if isinstance(item, Record) else item
        summary.count(outcome)
        report.write(outcome)
    if progress is not None:
        progress(summary.lines, summary.total, summary)
