"""An export's rows: a registered format's human rows, its automatic rows, or both (each row
then says whose labels it carries), or its judge or consensus rows, as dicts or JSON Lines, and how
many inputs it will read."""
from __future__ import annotations

import json
from collections.abc import Iterator

from annotate.models import Project
from annotate.pool.exporting import automatic, sourced
from annotate.pool.exporting.formats import get_format
from annotate.pool.exporting.formats.base import ExportFormat, ExportTally
from annotate.pool.exporting.options import CHUNK_SIZE, ExportError, ExportOptions, selected_annotations


def check_labels(format: str, options: ExportOptions) -> ExportFormat:
    """The format, once it is known to take the labels the options ask for."""
    found = get_format(format)
    if found.takes(options.labels):
        return found
    if found.human_only:
        raise ExportError(f"labels: {found.name} takes human labels only ({found.human_only})")
    raise ExportError(f"labels: {found.name} takes {', '.join(found.label_sources)} labels, not {options.labels}")


def iter_rows(*, project: Project | None = None, format: str, options: ExportOptions, chunk_size: int = CHUNK_SIZE,
              tally: ExportTally | None = None) -> Iterator[dict]:
    """The project's rows in `format`: nothing of another project is read."""
    project = Project.objects.given(project)
    tally = tally or ExportTally()
    found = check_labels(format, options)
    if options.labels in SOURCED:
        assert found.sourced_rows is not None  # check_labels: the format takes them
        return found.sourced_rows(project=project, options=options, tally=tally, chunk_size=chunk_size)
    if options.labels == "human" or found.automatic_rows is None:
        return found.rows(project=project, options=options, tally=tally, chunk_size=chunk_size)
    return _with_automatic(found, project=project, options=options, tally=tally, chunk_size=chunk_size)


# The label sources read per solution through `annotate.labeling.sources`.
SOURCED = ("judge", "consensus")


def _with_automatic(found: ExportFormat, *, project: Project, options: ExportOptions, tally: ExportTally,
                    chunk_size: int) -> Iterator[dict]:
    """Human rows (with `both`), then automatic rows: each row says whose labels it carries."""
    assert found.automatic_rows is not None
    if options.labels == "both":
        for row in found.rows(project=project, options=options, tally=tally, chunk_size=chunk_size):
            yield {**row, "label_source": "human"}
    # No annotator saw anything: the column is null, so every row has the same keys.
    for row in found.automatic_rows(project=project, tally=tally, chunk_size=chunk_size):
        yield {**row, "assistance": None}


def iter_jsonl(*, project: Project | None = None, format: str, options: ExportOptions, chunk_size: int = CHUNK_SIZE,
               tally: ExportTally | None = None) -> Iterator[str]:
    """JSON Lines, one string per line, for streaming responses and files alike."""
    project = Project.objects.given(project)
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": ")).encode
    for row in iter_rows(project=project, format=format, options=options, chunk_size=chunk_size, tally=tally):
        yield dumps(row) + "\n"


def count_inputs(*, project: Project | None = None, format: str, options: ExportOptions) -> int:
    """How many of the project's annotations (per-solution formats: solutions) the export will read."""
    project = Project.objects.given(project)
    found = check_labels(format, options)
    if options.labels in SOURCED:
        return sourced.count_solutions(project, options)
    offers_automatic = found.automatic_rows is not None and options.labels != "human"
    automatic_count = automatic.count_labeled_solutions(project) if offers_automatic else 0
    if offers_automatic and options.labels == "automatic":
        return automatic_count
    selected = selected_annotations(project=project, options=options)
    if found.per_solution:
        return selected.values("solution_id").distinct().count() + automatic_count
    return selected.count() + automatic_count
