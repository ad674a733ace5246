"""Datasets out: PRM800K, TRL stepwise supervision, ProcessBench and per-step soft labels,
as JSON Lines, Parquet or a Hugging Face `datasets` folder (`containers`, with a dataset card).

By stage: `options` (which annotations, checked up front), `loading` (keyset chunks of plain
records, flat memory), `formats` (rows per annotation or solution, every verdict read
through `annotate.labeling.verdicts`, what is left out counted in an `ExportTally`), `files` (atomic
files and export jobs). Callers use the names below: `exporting.iter_rows(...)`, `exporting.run_export_job(...)`.
"""
from annotate.pool.exporting.files import (
    create_export_job,
    download_name,
    export_path,
    finished_file,
    run_export_job,
    write_export,
)
from annotate.pool.exporting.formats import (
    FORMAT_HELP,
    FORMATS,
    PER_SOLUTION,
    ExportTally,
    check_format,
    check_labels,
    count_inputs,
    is_good,
    iter_jsonl,
    iter_rows,
)
from annotate.pool.exporting.loading import annotation_chunks, annotations, load_chunk
from annotate.pool.exporting.options import (
    CHUNK_SIZE,
    CONTAINERS,
    LABEL_SOURCES,
    ExportError,
    ExportOptions,
    parse_since,
    selected_annotations,
)

__all__ = [
    "CHUNK_SIZE", "CONTAINERS", "FORMATS", "LABEL_SOURCES",
    "FORMAT_HELP", "PER_SOLUTION", "ExportError", "ExportOptions", "ExportTally",
    "annotation_chunks", "annotations", "check_format", "check_labels", "count_inputs", "create_export_job",
    "download_name",
    "export_path", "finished_file", "is_good", "iter_jsonl", "iter_rows", "load_chunk", "parse_since",
    "run_export_job", "selected_annotations", "write_export",
]
