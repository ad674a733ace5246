"""Automatic labels in exports, only when asked (`labels=automatic|both`), never mixed with human ones.

An automatic label (``AutoStepLabel``) says what rollouts (K of N completions from the step
reached the known answer) or an imported dataset (a 1.0 / 0.0 verdict, no counts) say of a
pool step. Exports read them per solution:

- ``soft``: per step, K and N pooled over the automatic runs that labeled it (a label without
  rollout counts is one vote: 1 of 1 when good, 0 of 1 when bad); ``soft_labels`` = K/N.
- ``trl``: the solution's steps up to its first unlabeled one, each labeled good when K > 0
  (Math-Shepherd's hard estimate), as TRL's Math-Shepherd converter keeps every labeled step.
- ``prm800k``: each step of an annotation gains ``auto_labels`` (one entry per run), a key
  PRM800K readers ignore; the human fields are unchanged.

With ``both``, the human rows come first, then the automatic ones, each with ``label_source``.
The annotation filters (generations, date, QC, finish reasons) select human labels; automatic
rows come from every solution that has automatic labels.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from annotate.models import AutoStepLabel, Solution, Step
from annotate.pool.exporting.options import CHUNK_SIZE


@dataclass(frozen=True)
class AutoLabel:
    source: str
    method: str
    kind: str
    n_rollouts: int | None
    n_correct: int | None
    soft: float

    @property
    def hard(self) -> bool:
        # The model's rule, read off this record's fields of the same names. (Read off the class,
        # `hard` is the property object; mypy types it as the getter function.)
        rule = cast(property, AutoStepLabel.hard)
        assert rule.fget is not None
        return rule.fget(self)

    def votes(self) -> tuple[int, int]:
        """(K, N): the rollout counts, or one vote for a label that has none."""
        if self.n_rollouts is not None:
            return self.n_correct or 0, self.n_rollouts
        return int(self.hard), 1

    def as_dict(self) -> dict:
        return {"source": self.source, "method": self.method, "kind": self.kind, "n_rollouts": self.n_rollouts,
                "n_correct": self.n_correct, "soft": self.soft}


def labels_by_step(solution_ids) -> dict[int, dict[int, list[AutoLabel]]]:
    """solution id -> step index -> its automatic labels, in run order."""
    rows = (AutoStepLabel.objects.filter(step__solution_id__in=list(solution_ids))
            .order_by("step__solution_id", "step__index", "run_id")
            .values_list("step__solution_id", "step__index", "run__source", "run__method", "run__params",
                         "n_rollouts", "n_correct", "soft"))
    found: dict[int, dict[int, list[AutoLabel]]] = {}
    for solution_id, index, source, method, params, n, k, soft in rows:
        kind = (params or {}).get("kind", "automatic")
        found.setdefault(solution_id, {}).setdefault(index, []).append(AutoLabel(source, method, kind, n, k, soft))
    return found


def pooled(labels: list[AutoLabel]) -> tuple[int, int]:
    k = n = 0
    for label in labels:
        good, total = label.votes()
        k, n = k + good, n + total
    return k, n


def labeled_solution_chunks(chunk_size: int = CHUNK_SIZE) -> Iterator[list[tuple[Solution, list[str], dict]]]:
    """Solutions with automatic labels, in id order, a keyset page at a time: (solution, step texts, labels)."""
    with_labels = Solution.objects.filter(steps__auto_labels__isnull=False)
    last = 0
    while ids := list(with_labels.filter(id__gt=last).order_by("id").values_list("id", flat=True)
                      .distinct()[:chunk_size]):
        solutions = Solution.objects.select_related("problem").in_bulk(ids)
        texts: dict[int, list[str]] = {}
        for solution_id, text in Step.objects.filter(solution_id__in=ids).order_by("solution_id", "index") \
                .values_list("solution_id", "text"):
            texts.setdefault(solution_id, []).append(text)
        labels = labels_by_step(ids)
        yield [(solutions[i], texts[i], labels[i]) for i in ids]
        last = ids[-1]


def count_labeled_solutions() -> int:
    return Solution.objects.filter(steps__auto_labels__isnull=False).distinct().count()


def soft_rows(*, tally, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    for chunk in labeled_solution_chunks(chunk_size):
        for solution, steps, labels in chunk:
            tally.read += 1
            votes = [pooled(labels.get(i, [])) for i in range(len(steps))]
            yield {
                "id": solution.id, "problem": solution.problem.statement, "steps": steps,
                "k": [k for k, _ in votes], "n": [n for _, n in votes],
                "soft_labels": [k / n if n else None for k, n in votes], "annotations": 0,
                "label_source": "automatic",
            }


def trl_rows(*, tally, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    for chunk in labeled_solution_chunks(chunk_size):
        for solution, steps, labels in chunk:
            tally.read += 1
            completions, good = [], []
            for i, text in enumerate(steps):
                if i not in labels:
                    break
                completions.append(text)
                good.append(pooled(labels[i])[0] > 0)
            if completions:
                yield {"prompt": solution.problem.statement, "completions": completions, "labels": good,
                       "label_source": "automatic"}
            else:
                tally.skip("automatic_first_step_unlabeled")


def with_prm800k_extras(annotation_chunks, line_for) -> Iterator[dict]:
    """PRM800K lines, each step with `auto_labels` (its pool step's automatic labels)."""
    for chunk in annotation_chunks:
        labels = labels_by_step({a.solution_id for a in chunk})
        for annotation in chunk:
            line = line_for(annotation)
            by_index = labels.get(annotation.solution_id, {})
            for i, step in enumerate(line["label"]["steps"]):
                step["auto_labels"] = [label.as_dict() for label in by_index.get(i, [])]
            yield line
