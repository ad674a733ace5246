"""Importing JSONL files into a project's pool: problems, solutions, steps, and PRM800K labels.

``import_pool(project=..., path=...)`` streams the file line by line (constant memory), parses
each line in its format, extracts and grades the final answer, and writes batches of ~1000
lines with bulk inserts, each batch in one transaction. Everything it writes belongs to the
project. Re-importing finds everything by content hash within the project and creates nothing
(the same text imported into another project is that project's own copy). An identical
response is one solution, but every line is a sample of it: ``Solution.sample_count`` counts
the lines (by file digest and line number, so a re-import of the same file counts nothing
twice) for majority vote and best-of-N. Every input line
gets one report entry; a bad line is reported with the field at fault and the other lines
import, unless ``atomic=True``, when one bad line means nothing is written. Queueing what
was imported is the caller's next step (``queueing.enqueue_imported``).

The stages, one module each: ``reading`` (stream, count, detect the file's format),
``formats`` (the registry: one ``ImportFormat`` per module, each parsing one line into a
``Record``), ``writing`` (records into rows), ``report`` (the per-line report and the
summary) and ``jobs`` (the upload page's background jobs). This module runs them in order;
callers use the names it exports.
"""
from annotate.pool.importing.formats import FORMATS, ImportFormat, Record, choices, detect_format, names
from annotate.pool.importing.jobs import (
    create_import_job,
    finished_report,
    remove_expired_uploads,
    run_import_job,
    save_upload,
)
from annotate.pool.importing.pipeline import BATCH_SIZE, import_pool
from annotate.pool.importing.reading import count_lines, detect_file_format, file_digest, read_jsonl
from annotate.pool.importing.report import ImportSummary, Outcome
from annotate.pool.importing.writing import GradingBudget, SourceFile, insert_rows, write_batch

__all__ = [
    "BATCH_SIZE", "FORMATS", "GradingBudget", "ImportFormat", "ImportSummary", "Outcome", "Record", "SourceFile",
    "choices", "count_lines", "create_import_job", "detect_file_format", "detect_format", "file_digest",
    "finished_report", "import_pool", "insert_rows", "names", "read_jsonl", "remove_expired_uploads",
    "run_import_job", "save_upload", "write_batch",
]
