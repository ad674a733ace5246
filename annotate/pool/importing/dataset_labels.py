"""A dataset's own step labels (a ProcessBench first error, a Math-Shepherd tag), written with its
import as automatic labels of one run per dataset, kind and file of the project."""
from __future__ import annotations

from typing import TYPE_CHECKING

from annotate.models import AutoLabelRun, AutoStepLabel, Project, Solution, Step
from annotate.pool.importing.formats import Record

if TYPE_CHECKING:
    from annotate.pool.importing.writing import SourceFile


def write(records: list[Record], solutions: dict[str, Solution], project: Project,
                         source_file: SourceFile | None) -> None:
    """The datasets' own step labels, as automatic labels of this file's runs (existing ones kept)."""
    # (Each comprehension below repeats `imported_labels is not None` for the type checker only.)
    labeled = [r for r in records if r.imported_labels is not None]
    if not labeled:
        return
    keys = {(r.imported_labels.dataset, r.imported_labels.kind) for r in labeled if r.imported_labels is not None}
    runs = {key: _run(*key, project, source_file) for key in keys}
    solution_ids = {solutions[r.solution_hash].pk for r in labeled}
    steps = {(solution_id, index): pk for solution_id, index, pk in
             Step.objects.filter(solution_id__in=solution_ids).values_list("solution_id", "index", "id")}
    AutoStepLabel.objects.bulk_create([
        AutoStepLabel(run=runs[(r.imported_labels.dataset, r.imported_labels.kind)],
                      step_id=steps[(solutions[r.solution_hash].pk, i)], soft=soft)
        for r in labeled if r.imported_labels is not None
        for i, soft in enumerate(r.imported_labels.soft) if soft is not None
    ], ignore_conflicts=True)  # The same solution again (a re-import, a repeated line): labeled once per run.


def _run(dataset: str, kind: str, project: Project, source_file: SourceFile | None) -> AutoLabelRun:
    digest = source_file.digest if source_file else ""
    params = {"dataset": dataset, "kind": kind, "file_digest": digest,
              "file_name": source_file.name if source_file else ""}
    found = AutoLabelRun.objects.filter(project=project, method=AutoLabelRun.Method.IMPORTED, source=dataset,
                                        params__kind=kind, params__file_digest=digest).order_by("id").first()
    return found or AutoLabelRun.objects.create(project=project, method=AutoLabelRun.Method.IMPORTED, source=dataset,
                                                params=params)
