"""ProcessBench: one row per solution, its steps and the index of its first wrong step, from the
annotations that decide it (human labels only)."""
from __future__ import annotations

from collections.abc import Iterator

from annotate.models import FinishReason, Project
from annotate.pool.exporting.formats.base import (
    ASSISTANCE,
    ArrowTypes,
    ExportFormat,
    ExportTally,
    assistance_of,
    labeled,
)
from annotate.pool.exporting.loading import AnnotationRecord, solution_groups
from annotate.pool.exporting.options import CHUNK_SIZE, ExportOptions


def processbench_rows(*, project: Project, options: ExportOptions, tally: ExportTally,
                      chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """ProcessBench rows, one per solution: its own steps and the index of the first wrong one.

    `label` is the first pool step whose verdict is -1 (-1: every step correct, the one place
    -1 means "no error"), from the annotations that decide it (finished as solution /
    found_error, consistent, every step before the error rated). One label per solution: the
    annotations' label when they agree, else the latest reviewed annotation's (a reviewer's
    decision); otherwise it is left out. A solution with no known grade is left out:
    `final_answer_correct` is always a boolean. An annotation rating every step correct of a
    solution whose answer grades as wrong is left out too (`answer_contradicts_labels`, counted):
    the row would state both; the review page lists it for a reviewer.
    """
    for group in solution_groups(project=project, options=options, chunk_size=chunk_size):
        tally.read += 1
        solution = group[0].solution
        if solution.is_correct is None:
            tally.skip("unknown_grade")
            continue
        deciding, label = _solution_label(group, tally)
        if not deciding:
            continue
        yield {
            "id": f"{solution.source or 'stepwise'}-{solution.id}",
            "generator": solution.generator or (solution.meta or {}).get("model") or "unknown",
            "problem": solution.problem.statement,
            "steps": [step.text for step in solution.steps.all()],
            "final_answer_correct": bool(solution.is_correct),
            "label": -1 if label is None else label,
            "assistance": assistance_of(deciding),
        }


def _solution_label(group: list[AnnotationRecord], tally: ExportTally) -> tuple[list[AnnotationRecord], int | None]:
    """(the annotations that decide it, none when undecided; the first error, None when there is
    none) of one solution's annotations."""
    decided: list[tuple[AnnotationRecord, int | None]] = []
    for annotation in group:
        verdict = labeled(annotation, tally, trainable=False)
        if verdict is None:
            continue
        if not verdict.decides_first_error(annotation.finish_reason):
            reason = annotation.finish_reason
            tally.skip(reason if reason in (FinishReason.GIVE_UP, FinishReason.BAD_PROBLEM) else "undecided")
            continue
        if verdict.contradicts_grade(annotation.finish_reason, annotation.solution.is_correct):
            tally.skip("answer_contradicts_labels")
            continue
        decided.append((annotation, verdict.first_error))
    if not decided:
        return [], None
    if len({label for _, label in decided}) == 1:
        return [annotation for annotation, _ in decided], decided[0][1]
    reviewed = [(annotation.reviewed_at, annotation, label) for annotation, label in decided if annotation.reviewed_at]
    if reviewed:
        _, annotation, label = max(reviewed, key=lambda found: found[0])
        return [annotation], label
    tally.skip("disagreement")
    return [], None


def features(t: ArrowTypes, automatic_labels: bool) -> dict:
    return {"id": t.text, "generator": t.text, "problem": t.text, "steps": t.list_of(t.text),
            "final_answer_correct": t.boolean, "label": t.integer, **t.assistance}


FORMAT = ExportFormat(
    name="processbench",
    help="ProcessBench: one row per solution: id, generator, problem, steps, final_answer_correct, label",
    unit="solutions",
    rows=processbench_rows,
    human_only="its label is the annotators' first error",
    features=features,
    columns={
        "id": "`SOURCE-SOLUTION_ID`", "generator": "the model that wrote the solution",
        "problem": "the problem", "steps": "the solution's steps",
        "final_answer_correct": "whether its final answer grades as correct",
        "label": "the index of the first wrong step; -1 when every step is correct",
        "assistance": ASSISTANCE,
    },
    semantics="One row per solution whose deciding annotations agree on the first error (or "
              "a reviewer decided it); a -1 rating is an error. An annotation rating every step "
              "correct of a solution whose answer grades as wrong is left out "
              "(`answer_contradicts_labels`): the review page lists it.",
)
