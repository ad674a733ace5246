"""Per-step soft labels: of the annotators who rated a pool step's very text, how many rated it
good (K of N); from automatic labels, K and N pooled over the runs that labeled it."""
from __future__ import annotations

from collections.abc import Iterator

from annotate.labeling import verdicts
from annotate.models import Project
from annotate.pool.exporting import automatic, sourced
from annotate.pool.exporting.formats.base import (
    ASSISTANCE,
    ArrowTypes,
    ExportFormat,
    ExportTally,
    assistance_of,
    labeled,
)
from annotate.pool.exporting.loading import solution_groups
from annotate.pool.exporting.options import CHUNK_SIZE, LABEL_SOURCES, ExportOptions
from steps.ratings import is_good


def soft_label_rows(*, project: Project, options: ExportOptions, tally: ExportTally,
                    chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """Per solution and step: K annotators rated it good out of N who rated that very text."""
    for group in solution_groups(project=project, options=options, chunk_size=chunk_size):
        tally.read += 1
        found = [(a, v) for a in group if (v := labeled(a, tally)) is not None]
        if found:
            row = _soft_labels(group[0].solution, [v for _, v in found], neutral_is_good=options.neutral_is_good)
            yield {**row, "assistance": assistance_of([a for a, _ in found])}


def _soft_labels(solution, labels: list[verdicts.Verdicts], *, neutral_is_good: bool) -> dict:
    steps = [step.text for step in solution.steps.all()]
    good, rated = [0] * len(steps), [0] * len(steps)
    for verdict in labels:
        for i, rating in enumerate(verdict.pool_path):
            if rating is None:
                continue
            rated[i] += 1
            good[i] += is_good(rating, neutral_is_good=neutral_is_good)
    return {
        "id": solution.id,
        "problem": solution.problem.statement,
        "steps": steps,
        "k": good,
        "n": rated,
        "soft_labels": [k / n if n else None for k, n in zip(good, rated, strict=True)],
        "annotations": len(labels),
    }


def automatic_rows(*, project: Project, tally: ExportTally, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """Per solution with automatic labels and step: K and N pooled over the runs that labeled it."""
    for chunk in automatic.labeled_solution_chunks(project, chunk_size):
        for solution, steps, labels in chunk:
            tally.read += 1
            votes = [automatic.pooled(labels.get(i, [])) for i in range(len(steps))]
            yield {
                "id": solution.id, "problem": solution.problem.statement, "steps": steps,
                "k": [k for k, _ in votes], "n": [n for _, n in votes],
                "soft_labels": [k / n if n else None for k, n in votes], "annotations": 0,
                "label_source": "automatic",
            }


def sourced_rows(*, project: Project, options: ExportOptions, tally: ExportTally,
                 chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """Per solution and step: the judge's P(good), or the agreed 1.0 / 0.0; a step without a label
    (a silent judge, a step the sources did not agree on, a step after the first agreed bad one) is
    null, with k = n = 0; a label is one vote (k of n = 1 of 1 or 0 of 1)."""
    for found in sourced.solutions(project=project, options=options, tally=tally, chunk_size=chunk_size):
        solution, steps = found.solution, found.steps
        yield {
            "id": solution.id, "problem": solution.problem.statement, "steps": [step.text for step in steps],
            "k": [int(bool(step.good)) for step in steps], "n": [int(step.good is not None) for step in steps],
            "soft_labels": [step.soft for step in steps], "annotations": 0, "assistance": None,
            "label_source": found.source,
        }


def features(t: ArrowTypes, automatic_labels: bool) -> dict:
    return {"id": t.integer, "problem": t.text, "steps": t.list_of(t.text), "k": t.list_of(t.integer),
            "n": t.list_of(t.integer), "soft_labels": t.list_of(t.number), "annotations": t.integer,
            **t.assistance, **({"label_source": t.text} if automatic_labels else {})}


FORMAT = ExportFormat(
    name="soft",
    help="Per-step soft labels: K of N annotators rated each step good",
    unit="solutions",
    rows=soft_label_rows,
    automatic_rows=automatic_rows,
    sourced_rows=sourced_rows,
    label_sources=LABEL_SOURCES,
    features=features,
    columns={
        "id": "the solution's id", "problem": "the problem", "steps": "the solution's steps",
        "k": "per step, annotators who rated it good (automatic rows: rollouts that reached the answer)",
        "n": "per step, annotators who rated it (automatic rows: rollouts made; an imported verdict is 1)",
        "soft_labels": "per step, k/n (null where nobody rated the step)",
        "annotations": "annotations read for the solution (0 in automatic rows)",
        "assistance": ASSISTANCE,
        "label_source": "`human` (annotators), `automatic` (rollouts or an imported dataset), `judge` (a verifier "
                        "model) or `consensus` (the steps the chosen sources agree on), never mixed",
    },
    semantics="Per pool step, of the annotators who rated that very text (up to each one's first error), "
              "how many rated it good.",
    automatic_semantics="Automatic rows: per step, K and N pooled over the automatic runs that labeled it (an "
                        "imported verdict is one vote, 1 of 1 or 0 of 1); soft_labels = K/N.",
    sourced_semantics="Judge rows: soft_labels is the judge's P(good), k and n its verdict as one vote. Consensus "
                      "rows: 1.0 where every chosen source said good, 0.0 where all said bad; a step they did "
                      "not agree on (one silent, or they differ) is null with n = 0 and the row goes on; the "
                      "labels end at the first agreed bad step.",
)
