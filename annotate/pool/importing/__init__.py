"""Importing JSONL files into the pool: problems, solutions, steps, and PRM800K labels.

``import_pool(path=...)`` streams the file line by line (constant memory), parses each line
in its format, extracts and grades the final answer, and writes batches of ~1000 lines with
bulk inserts, each batch in one transaction. Re-importing finds everything by content hash
and creates nothing. An identical response is one solution, but every line is a sample of
it: ``Solution.sample_count`` counts the lines (by file digest and line number, so a re-import
of the same file counts nothing twice) for majority vote and best-of-N. Every input line
gets one report entry; a bad line is reported with the field at fault and the other lines
import, unless ``atomic=True``, when one bad line means nothing is written. Queueing what
was imported is the caller's next step (``queueing.enqueue_imported``).

The stages, one module each: ``reading`` (stream, count, detect the file's format),
``formats`` (one line of each format into a ``Record``), ``writing`` (records into rows),
``report`` (the per-line report and the summary) and ``jobs`` (the upload page's background
jobs). This module runs them in order; callers use the names it exports.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from django.db import transaction

from annotate.pool.importing.formats import (
    FORMATS,
    PARSERS,
    Parser,
    Record,
    check_format,
    detect_format,
    parser_for,
)
from annotate.pool.importing.jobs import create_import_job, remove_expired_uploads, run_import_job, save_upload
from annotate.pool.importing.reading import BadJson, count_lines, detect_file_format, file_digest, read_jsonl, split_of
from annotate.pool.importing.report import ImportSummary, Outcome, Report
from annotate.pool.importing.writing import SourceFile, grading_note, insert_rows, write_batch
from annotate.pool.prm800k import LineError
from annotate.text.splitting import SplitMode, check_mode

__all__ = [
    "BATCH_SIZE", "FORMATS", "PARSERS", "ImportSummary", "Outcome", "Record", "SourceFile", "count_lines",
    "create_import_job", "detect_file_format", "detect_format", "file_digest", "grading_note", "import_pool",
    "insert_rows", "read_jsonl", "remove_expired_uploads", "run_import_job", "save_upload", "write_batch",
]

BATCH_SIZE = 1000

Progress = Callable[[int, int, ImportSummary], None]


class _Rollback(Exception):
    pass


def import_pool(
    *,
    path: str | Path,
    format: str = "auto",
    source: str | None = None,
    atomic: bool = False,
    report_path: str | Path | None = None,
    progress: Progress | None = None,
    split_mode: SplitMode = "auto",
    batch_size: int = BATCH_SIZE,
    file_name: str | None = None,
) -> ImportSummary:
    """Import one JSONL file into the pool; see the module docstring.

    `file_name` is the name its sample lines keep (default: the path's), e.g. an upload's own name.
    """
    check_format(format)
    split_mode = check_mode(split_mode)
    if source is not None and len(source) > 100:
        raise ValueError("source is longer than 100 characters")
    path = Path(path)
    if format == "auto":
        format = detect_file_format(path) or "auto"
    summary = ImportSummary(path=str(path), format=format, total=count_lines(path))
    parse = parser_for(format, source=source, split=split_of(path), split_mode=split_mode)
    source_file = SourceFile(digest=file_digest(path), name=file_name or path.name)
    report = Report(report_path)
    try:
        if atomic:
            try:
                with transaction.atomic():
                    _import_lines(path, parse, summary, report, progress, batch_size, source_file)
                    if summary.errors:
                        raise _Rollback
            except _Rollback:
                summary.rolled_back = True
                summary.forget_written()
        else:
            _import_lines(path, parse, summary, report, progress, batch_size, source_file)
        report.finish(summary)
    finally:
        report.close()
    return summary


def _import_lines(path: Path, parse: Parser, summary: ImportSummary, report: Report,
                  progress: Progress | None, batch_size: int, source_file: SourceFile) -> None:
    # Lines in input order, parsed (Record) or already failed (Outcome), so that the
    # report keeps the file's order although only the records go to the database.
    pending: list[Record | Outcome] = []
    for line_no, obj in read_jsonl(path):
        summary.lines += 1
        try:
            if isinstance(obj, BadJson):
                raise LineError("line", obj.message)
            pending.append(parse(obj, line_no))
        except (LineError, ValueError) as error:
            pending.append(Outcome(line_no=line_no, status="error", error=str(error)))
        if len(pending) >= batch_size:
            _flush(pending, summary, report, progress, source_file)
            pending = []
    _flush(pending, summary, report, progress, source_file)


def _flush(pending: list[Record | Outcome], summary: ImportSummary, report: Report, progress: Progress | None,
           source_file: SourceFile) -> None:
    records = [item for item in pending if isinstance(item, Record)]
    written = iter(write_batch(records, source_file=source_file) if records else [])
    for item in pending:
        outcome = next(written) if isinstance(item, Record) else item
        summary.count(outcome)
        report.write(outcome)
    if progress is not None:
        progress(summary.lines, summary.total, summary)
