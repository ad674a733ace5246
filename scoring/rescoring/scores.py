"""Scores in the database: which solutions a version has not scored, reading a chunk's texts,
writing its scores (keyed, so a chunk that runs twice writes nothing twice), and the current
version's view of a solution that an assisted labeling project shows.

Scores are written as plain rows, not model instances: one INSERT ... SELECT FROM unnest(arrays)
ON CONFLICT DO NOTHING per table on PostgreSQL, executemany on SQLite. Building a StepScore
per step cost as much as the database write.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.db import connection, models, transaction
from django.db.models import Exists, OuterRef, QuerySet, Subquery

from annotate.models import Project, Solution, Step
from scoring.core.step_scores import StepProbability, aggregate
from scoring.models import ModelVersion, SolutionScore, StepScore
from scoring.store import registry

if TYPE_CHECKING:
    from scoring.core.prm import LoadedPRM
    from scoring.store.remote_scorer import RemotePRM


def unscored_solution_ids(*, model_version: ModelVersion, project: Project | None = None,
                          solution_ids: Sequence[int] | None = None) -> list[int]:
    """Solutions with steps that this version has not scored yet, in id order: of the project's
    pool, or of the given solutions (a chunk's, of one project), or both."""
    if project is None and solution_ids is None:
        raise ValueError("unscored_solution_ids needs a project or solution ids: nothing reads across projects")
    scored = Exists(SolutionScore.objects.filter(solution_id=OuterRef("pk"), model_version=model_version))
    solutions = Solution.objects.with_steps()
    if project is not None:
        solutions = solutions.filter(project=project)
    if solution_ids is not None:
        solutions = solutions.filter(pk__in=solution_ids)
    return list(solutions.exclude(scored).order_by("pk").values_list("pk", flat=True))


def read_items(solution_ids: Sequence[int]) -> tuple[list[int], list[list[int]], list[tuple[str, list[str]]]]:
    """(solution ids, step ids per solution, (problem, step texts) per solution) in two queries."""
    problems = dict(
        Solution.objects.filter(pk__in=solution_ids).values_list("pk", "problem__statement")
    )
    step_ids: dict[int, list[int]] = {pk: [] for pk in problems}
    texts: dict[int, list[str]] = {pk: [] for pk in problems}
    rows = Step.objects.filter(solution_id__in=problems).order_by("solution_id", "index")
    for solution_id, step_id, text in rows.values_list("solution_id", "pk", "text"):
        step_ids[solution_id].append(step_id)
        texts[solution_id].append(text)
    ordered = [pk for pk in sorted(problems) if texts[pk]]
    return ordered, [step_ids[pk] for pk in ordered], [(problems[pk], texts[pk]) for pk in ordered]


STEP_FIELDS = ("step", "model_version", "p", "mean", "sigma")
SOLUTION_FIELDS = ("solution", "model_version", "product", "min", "last", "mean", "sigma")


def write_scores(
    *, model_version: ModelVersion, solution_ids: Sequence[int], step_ids: Sequence[Sequence[int]],
    results: Sequence[Sequence[StepProbability]],
) -> int:
    """Insert step and solution scores; rows that already exist are left alone."""
    version = model_version.pk
    step_rows: list[tuple] = []
    solution_rows: list[tuple] = []
    for solution_id, ids, steps in zip(solution_ids, step_ids, results):
        step_rows.extend((step_id, version, s.p, s.mean, s.sigma) for step_id, s in zip(ids, steps))
        solution = aggregate(steps)
        solution_rows.append((solution_id, version, *(solution[field] for field in SOLUTION_FIELDS[2:])))
    with transaction.atomic():
        insert_new(StepScore, STEP_FIELDS, step_rows)
        insert_new(SolutionScore, SOLUTION_FIELDS, solution_rows)
    return len(solution_rows)


def current_step_ps(solution_id: int) -> QuerySet:
    """The P(step right) of each step of the solution by its project's current model, in step order
    (None where it has not scored the step), as one query: the model's view that an assisted
    labeling project shows. The labeling side may not import this app (import-linter's layers), so
    this app gives it the query when it is ready (scoring.apps), and the labeling side runs it
    (annotate.labeling.assistance). Read where the scores are stored, it changes with them and with
    the project's current model."""
    by_current = StepScore.objects.filter(step_id=OuterRef("pk"),
                                          model_version__current_in__project_id=OuterRef("solution__project_id"))
    current = by_current.values("p")[:1]
    return Step.objects.filter(solution_id=solution_id).order_by("index").annotate(p=Subquery(current)).values_list("p")


def insert_new(model: type[models.Model], fields: Sequence[str], rows: Sequence[Sequence]) -> None:
    """Insert the rows whose unique keys are not in the table yet (ON CONFLICT DO NOTHING, as
    bulk_create(ignore_conflicts=True)), values already in database form. Call it in a transaction."""
    if not rows:
        return
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    concrete = {field.name: field for field in model._meta.concrete_fields}
    chosen = [concrete[name] for name in fields]
    columns = ", ".join(quote(column) for field in chosen if (column := field.column))
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            placeholders = ", ".join(["%s"] * len(fields))
            cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({placeholders}) ON CONFLICT DO NOTHING", rows)
            return
        # One statement: each column an array parameter, unnested into rows. A COPY into a staging
        # table cost PostgreSQL four statements and a TRUNCATE (new files, catalog rows) per write.
        arrays = ", ".join(f"%s::{field.cast_db_type(connection)}[]" for field in chosen)
        cursor.execute(f"INSERT INTO {table} ({columns}) SELECT * FROM unnest({arrays}) ON CONFLICT DO NOTHING",
                       [list(column) for column in zip(*rows)])


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
