"""Datasets out: PRM800K, TRL stepwise supervision, ProcessBench, per-step soft labels, OpenRLHF's
PRM data and verification chains (critique), as JSON Lines, Parquet or a Hugging Face `datasets`
folder (`containers`, with a dataset card).

Every export is one project's: each entry point takes the `project` (an ExportJob its own), and
every query it runs starts from the project's annotations or solutions, so the work is
proportional to the project and nothing of another project is read.

By stage: `options` (which annotations, checked up front), `loading` (chunks of plain
records, flat memory), `formats` (the registry: one `ExportFormat` per module, its rows per
annotation or solution, every verdict read through `annotate.labeling.verdicts`, what is left out
counted in an `ExportTally`), `automatic` and `sourced` (rollout and imported labels; a judge's
labels and the consensus of sources, through `annotate.labeling.sources`), `rows` (a format's rows
for the labels asked, as JSON Lines), `files` (atomic files and export jobs). Callers use the names
below: `exporting.iter_rows(...)`, `exporting.run_export_job(...)`, `exporting.FORMATS[name].help`.
"""
from annotate.pool.exporting.cards import consensus_counts
from annotate.pool.exporting.files import (
    create_export_job,
    download_name,
    export_path,
    finished_file,
    run_export_job,
    write_export,
)
from annotate.pool.exporting.formats import FORMATS, check_format, choices, get_format
from annotate.pool.exporting.formats.base import ExportFormat, ExportTally
from annotate.pool.exporting.loading import annotation_chunks, annotations, load_chunk
from annotate.pool.exporting.options import (
    CHUNK_SIZE,
    CONSENSUS_SOURCES,
    CONTAINERS,
    DEFAULT_CONSENSUS,
    LABEL_SOURCES,
    ExportError,
    ExportOptions,
    parse_since,
    selected_annotations,
)
from annotate.pool.exporting.rows import check_labels, count_inputs, iter_jsonl, iter_rows
from steps.ratings import is_good

__all__ = [
    "CHUNK_SIZE", "CONSENSUS_SOURCES", "CONTAINERS", "DEFAULT_CONSENSUS", "FORMATS", "LABEL_SOURCES", "ExportError",
    "ExportFormat", "ExportOptions", "ExportTally", "annotation_chunks", "annotations", "check_format",
    "check_labels", "choices", "consensus_counts", "count_inputs", "create_export_job", "download_name",
    "export_path", "finished_file", "get_format", "is_good", "iter_jsonl", "iter_rows", "load_chunk", "parse_since",
    "run_export_job", "selected_annotations", "write_export",
]
