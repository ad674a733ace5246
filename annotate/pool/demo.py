"""Taking the demo pool away: the one rule that `./stepwise manage remove_demo` and the home
page's "Remove demo data" button both apply.

A demo solution with an annotation, submitted or in progress, holds someone's work: it stays,
and so does its problem. Scores, steps and queue items go with the solutions they belong to.
"""
from dataclasses import dataclass

from django.db import transaction

from annotate.models import Problem, Solution
from annotate.models.pool import DEMO_SOURCE, SolutionQuerySet


@dataclass(frozen=True)
class DemoRemoval:
    solutions: int  # demo solutions deleted
    problems: int  # demo problems deleted, once none of their solutions was left
    kept: int  # demo solutions kept because someone annotated them


def removable() -> SolutionQuerySet:
    """The demo solutions nobody has annotated: what `remove` deletes."""
    return Solution.objects.demo().filter(annotations__isnull=True)


def remove() -> DemoRemoval:
    """Delete the demo solutions nobody has annotated, then the demo problems left without one."""
    with transaction.atomic():
        unannotated = removable()
        solutions = unannotated.count()
        unannotated.delete()
        empty = Problem.objects.filter(source=DEMO_SOURCE, solutions__isnull=True)
        problems = empty.count()
        empty.delete()
    return DemoRemoval(solutions=solutions, problems=problems, kept=Solution.objects.demo().count())
