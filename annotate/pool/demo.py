"""The demo: two small labeling projects side by side, and taking their pools away again.

`seed` (run by `./stepwise run` through `manage.py seed_demo`) makes a GSM8K project and a MATH
project with different rules, so the switch between projects shows from the first page. Their pools
come from files in the repository (`demo_data/`, its README says what they are): each problem's
reference solution and a copy with one wrong step, imported as the `demo` source, which the queue
serves after every other solution. Running it again adds nothing, and leaves alone the settings
an admin has changed since.

`remove` is the one rule that `./stepwise manage remove_demo` and the home page's "Remove demo
data" button both apply: a demo solution with an annotation, submitted or in progress, holds
someone's work: it stays, and so does its problem. Scores, steps and queue items go with the
solutions they belong to.
"""
from __future__ import annotations

import itertools
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.deletion import Collector, ProtectedError

from annotate.labeling import queue_items, queueing
from annotate.models import Assistance, LabelingConfig, Membership, Problem, Project, Solution
from annotate.models.pool import DEMO_SOURCE, SolutionQuerySet
from annotate.models.projects import DEFAULT_SLUG
from annotate.pool import importing

DATA = Path(__file__).resolve().parent / "demo_data"


@dataclass(frozen=True)
class DemoProject:
    slug: str
    name: str
    description: str
    guideline: str
    data: str  # a file in demo_data/, generic format
    settings: dict = field(default_factory=dict)  # LabelingConfig fields, set when the project is made


PROJECTS = (
    DemoProject(
        slug="gsm8k-demo", name="GSM8K (demo)",
        description="Grade-school word problems: one annotator per solution, stop at the first error.",
        guideline="Rate each step: +1 when it is right and moves toward the answer, 0 when it is right but "
                  "adds nothing, -1 at the first mistake (the task ends there). Check every calculation.",
        data="gsm8k.jsonl",
        settings={"overlap_k": 1, "qc_rate": 0.1, "stop_at_first_error": True, "allow_human_completion": False,
                  "assistance": Assistance.BLIND, "queue_size": 200},
    ),
    DemoProject(
        slug="math-demo", name="MATH (demo)",
        description="Competition problems: two annotators per solution, every step rated, corrections written.",
        guideline="Rate every step, also after a mistake. After a -1 you may write the step as it should be "
                  "(key w). The model's guess of the first error is shown once a model is current.",
        data="math.jsonl",
        settings={"overlap_k": 2, "qc_rate": 0.0, "stop_at_first_error": False, "allow_human_completion": True,
                  "assistance": Assistance.SUGGEST, "queue_size": 100},
    ),
)


@dataclass(frozen=True)
class Seeded:
    project: Project
    created: int  # solutions imported now
    pool: int  # demo solutions the project holds
    ready: int  # the project's solutions waiting for an annotator (its home page's figure)


def seed(*, problems: int | None = None, members: dict[str, str] | None = None) -> list[Seeded]:
    """Make (or find) the demo projects, import their pools and queue them; `members` (username ->
    role) join each. `problems` takes only each file's first problems (the tests' small pools)."""
    seeded = [_seed_project(spec, problems, members or {}) for spec in PROJECTS]
    _drop_empty_default_project()
    return seeded


def _seed_project(spec: DemoProject, problems: int | None, members: dict[str, str]) -> Seeded:
    project, created = Project.objects.get_or_create(
        slug=spec.slug, defaults={"name": spec.name, "description": spec.description, "guideline": spec.guideline})
    if created:
        config = LabelingConfig.of(project)
        for name, value in spec.settings.items():
            setattr(config, name, value)
        config.save()
    for user in get_user_model().objects.filter(username__in=list(members)):
        Membership.objects.get_or_create(project=project, user=user, defaults={"role": members[user.username]})
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / spec.data
        path.write_text("".join(_lines(DATA / spec.data, problems)), encoding="utf-8")
        summary = importing.import_pool(project=project, path=path, format="generic", source=DEMO_SOURCE)
    queueing.ensure_default_queue(project)
    # Counted from the tables, not from the import summary: on a new database the file's own
    # repeated lines are "duplicates" too, which read as if the pool had been there already.
    # Ready: what the project's home page says is waiting (the same function).
    pool = Solution.objects.filter(project=project).demo().count()
    return Seeded(project=project, created=summary.created, pool=pool, ready=queue_items.available_count(project))


def _lines(path: Path, problems: int | None) -> list[str]:
    """The file's lines of its first `problems` problems (all of them for None)."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.readlines()
    if problems is None:
        return lines
    by_problem = itertools.groupby(lines, key=lambda line: json.loads(line)["problem"])
    return [line for _, group in itertools.islice(by_problem, problems) for line in group]


def _drop_empty_default_project() -> None:
    """A new install's `default` project, made by the migrations and never used, would stand empty
    beside the demo's: it goes, but only while deleting it would take nothing but its settings."""
    project = Project.objects.filter(slug=DEFAULT_SLUG).first()
    if project is None:
        return
    collector = Collector(using=project._state.db or "default")
    try:
        collector.collect([project])
    except ProtectedError:  # It owns something.
        return
    own = {Project, LabelingConfig}
    if set(collector.data) - own or any(qs.exists() for qs in collector.fast_deletes if qs.model not in own):
        return
    project.delete()


@dataclass(frozen=True)
class DemoRemoval:
    solutions: int  # demo solutions deleted
    problems: int  # demo problems deleted, once none of their solutions was left
    kept: int  # demo solutions kept because someone annotated them


def removable(project: Project) -> SolutionQuerySet:
    """The project's demo solutions nobody has annotated: what `remove` deletes."""
    return Solution.objects.filter(project=project).demo().filter(annotations__isnull=True)


def remove(*, project: Project) -> DemoRemoval:
    """Delete the project's demo solutions nobody has annotated, then its demo problems left without one."""
    with transaction.atomic():
        unannotated = removable(project)
        solutions = unannotated.count()
        unannotated.delete()
        empty = Problem.objects.filter(project=project, source=DEMO_SOURCE, solutions__isnull=True)
        problems = empty.count()
        empty.delete()
    return DemoRemoval(solutions=solutions, problems=problems,
                       kept=Solution.objects.filter(project=project).demo().count())

