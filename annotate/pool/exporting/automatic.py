"""Automatic labels in exports, only when asked (`labels=automatic|both`), never mixed with human ones.

An automatic label (``AutoStepLabel``) says what rollouts (K of N completions from the step
reached the known answer) or an imported dataset (a 1.0 / 0.0 verdict, no counts) say of a
pool step. This module reads them per solution, a page at a time, and pools a step's
votes (a label without rollout counts is one vote: 1 of 1 when good, 0 of 1 when bad); each
format says what its automatic rows are (`ExportFormat.automatic_rows`: ``soft`` and ``trl``;
``prm800k`` adds ``auto_labels`` to each step of its own lines).

With ``both``, the human rows come first, then the automatic ones, each with ``label_source``.
The annotation filters (generations, date, QC, finish reasons) select human labels; automatic
rows come from every solution of the project that has automatic labels.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from annotate.models import AutoStepLabel, Project, Solution, Step
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
    rows = (AutoStepLabel.objects.automatic().filter(step__solution_id__in=list(solution_ids))
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


def _labeled_solutions(project: Project):
    automatic = AutoStepLabel.objects.automatic().filter(step__solution__project=project)
    return Solution.objects.filter(project=project, pk__in=automatic.values("step__solution_id"))


def labeled_solution_chunks(project: Project,
                            chunk_size: int = CHUNK_SIZE) -> Iterator[list[tuple[Solution, list[str], dict]]]:
    """The project's solutions with automatic labels, in id order, a page at a time: (solution, step
    texts, labels). Their ids are read once, from the project's solutions only."""
    all_ids = list(_labeled_solutions(project).order_by("id").values_list("id", flat=True).distinct())
    for start in range(0, len(all_ids), chunk_size):
        ids = all_ids[start:start + chunk_size]
        solutions = Solution.objects.select_related("problem").in_bulk(ids)
        texts: dict[int, list[str]] = {}
        for solution_id, text in Step.objects.filter(solution_id__in=ids).order_by("solution_id", "index") \
                .values_list("solution_id", "text"):
            texts.setdefault(solution_id, []).append(text)
        labels = labels_by_step(ids)
        yield [(solutions[i], texts[i], labels[i]) for i in ids]


def count_labeled_solutions(project: Project) -> int:
    return _labeled_solutions(project).distinct().count()
