"""Scores in the database: which solutions a version has not scored, reading a chunk's texts,
writing its scores (keyed, so a chunk that runs twice writes nothing twice)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.db import transaction

from annotate.models import Solution, Step
from scoring.core.step_scores import StepProbability, aggregate
from scoring.models import ModelVersion, SolutionScore, StepScore
from scoring.store import registry

if TYPE_CHECKING:
    from scoring.core.prm import LoadedPRM
    from scoring.store.remote_scorer import RemotePRM


def unscored_solution_ids(*, model_version: ModelVersion, solution_ids: Sequence[int] | None = None) -> list[int]:
    """Solutions with steps that this version has not scored yet, in id order."""
    solutions = Solution.objects.filter(steps__isnull=False)
    if solution_ids is not None:
        solutions = solutions.filter(pk__in=solution_ids)
    solutions = solutions.exclude(scores__model_version=model_version)
    return sorted(set(solutions.values_list("pk", flat=True)))


def read_items(solution_ids: Sequence[int]) -> tuple[list[int], list[list[int]], list[tuple[str, list[str]]]]:
    """(solution ids, step ids per solution, (problem, step texts) per solution) in two queries."""
    problems = dict(
        Solution.objects.filter(pk__in=solution_ids).values_list("pk", "problem__statement")
    )
    step_ids: dict[int, list[int]] = {pk: [] for pk in problems}
    texts: dict[int, list[str]] = {pk: [] for pk in problems}
    rows = Step.objects.filter(solution_id__in=problems).order_by("solution_id", "index")
    for solution_id, step_id, text in rows.values_list("solution_id", "pk", "text").iterator(chunk_size=2000):
        step_ids[solution_id].append(step_id)
        texts[solution_id].append(text)
    ordered = [pk for pk in sorted(problems) if texts[pk]]
    return ordered, [step_ids[pk] for pk in ordered], [(problems[pk], texts[pk]) for pk in ordered]


def write_scores(
    *, model_version: ModelVersion, solution_ids: Sequence[int], step_ids: Sequence[Sequence[int]],
    results: Sequence[Sequence[StepProbability]],
) -> int:
    """Insert step and solution scores; rows that already exist are left alone."""
    step_rows: list[StepScore] = []
    solution_rows: list[SolutionScore] = []
    for solution_id, ids, steps in zip(solution_ids, step_ids, results):
        step_rows.extend(
            StepScore(step_id=step_id, model_version=model_version, p=s.p, mean=s.mean, sigma=s.sigma)
            for step_id, s in zip(ids, steps)
        )
        solution_rows.append(SolutionScore(solution_id=solution_id, model_version=model_version, **aggregate(steps)))
    with transaction.atomic():
        StepScore.objects.bulk_create(step_rows, ignore_conflicts=True, batch_size=2000)
        SolutionScore.objects.bulk_create(solution_rows, ignore_conflicts=True, batch_size=2000)
    return len(solution_rows)


def score_solutions(
    *, model_version: ModelVersion, solution_ids: Sequence[int], prm: LoadedPRM | RemotePRM | None = None
) -> int:
    """Score the given solutions that this version has not scored yet; returns how many."""
    todo = unscored_solution_ids(model_version=model_version, solution_ids=solution_ids)
    if not todo:
        return 0
    prm = prm or registry.load(model_version)
    ids, step_ids, items = read_items(todo)
    results = prm.step_probabilities(items)
    return write_scores(model_version=model_version, solution_ids=ids, step_ids=step_ids, results=results)
