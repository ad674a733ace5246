"""The rest of a site for the scale benchmarks: other projects, each with a pool and a queue of its
own, beside the project a benchmark labels (`bench_http --site-projects N --site-solutions M`).

A team's campaigns share the tables: what must hold is that labeling one project costs what it
would if that project were alone. The other projects' solutions are made once and kept (source
"bench-site"); problems and solutions go through the ORM's bulk insert, their steps (eight to a
solution, the bulk of the rows) through COPY, as an import writes them.
"""
from __future__ import annotations

import time

from django.db import transaction

from annotate.labeling import queueing
from annotate.models import LabelingConfig, Problem, Project, Solution, Step
from annotate.models.pool import content_hash
from annotate.pool.importing.writing import insert_rows

SOURCE = "bench-site"
STEPS_PER_SOLUTION = 8
BATCH = 5000


def slug(index: int) -> str:
    return f"bench-site-{index:02d}"


def fill(*, projects: int, solutions: int) -> float | None:
    """`projects` other projects holding `solutions` in all (split evenly), each queued as a new
    project queues its pool; seconds spent, None when they were there already."""
    per_project = solutions // projects if projects else 0
    started = time.perf_counter()
    built = False
    for index in range(1, projects + 1):
        project, _ = Project.objects.get_or_create(slug=slug(index), defaults={"name": f"Bench site {index}"})
        have = Solution.objects.filter(project=project, source=SOURCE).count()
        if have < per_project:
            _add_solutions(project, have, per_project)
            LabelingConfig.of(project)  # a new project's settings, as the settings page would make them
            queueing.ensure_default_queue(project)
            built = True
    return time.perf_counter() - started if built else None


def _add_solutions(project: Project, start: int, stop: int) -> None:
    for first in range(start, stop, BATCH):
        last = min(stop, first + BATCH)
        with transaction.atomic():
            problems = Problem.objects.bulk_create(
                Problem(project=project, statement=f"Site problem {i} of {project.slug}: what is ${i} + 1$?",
                        ground_truth_answer=str(i + 1), source=SOURCE, content_hash=content_hash(SOURCE, "problem", i))
                for i in range(first, last)
            )
            made = Solution.objects.bulk_create(
                Solution(project=project, problem=problem, final_answer=str(i + 1), is_correct=i % 4 == 0,
                         source=SOURCE, content_hash=content_hash(SOURCE, "solution", i))
                for problem, i in zip(problems, range(first, last))
            )
            insert_rows(Step, ("solution_id", "index", "text"), (
                (solution.pk, k, f"Step {k + 1}: add $1$ to ${i}$.")
                for solution, i in zip(made, range(first, last)) for k in range(STEPS_PER_SOLUTION)
            ))
