"""How far a project's label sources agree: every pair of people, rollouts, a judge and the PRM,
over its labeled solutions. The figures of the sources page.

Each step is read as `annotate.labeling.sources` reads it (the one definition of every source's
verdict and first error), the PRM's word from the project's current model's stored scores. The
solutions are read in chunks of `CHUNK` ids and only counts are kept (`steps.agreement`'s
tallies), so a large pool is never in memory at once. The newest `MAX_SOLUTIONS` solutions that
some person, rollout run or judge labeled are considered, and the page says when there were more.
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db.models import Exists, OuterRef, Q

from annotate.labeling import sources
from annotate.labeling.sources import SOURCES, StepSources
from annotate.models import Annotation, AutoStepLabel, Project, Solution
from scoring.models import ModelVersion, StepScore
from scoring.store import registry
from steps.agreement import POSITION_BUCKETS, FirstErrorTally, StepTable, position_bucket

CHUNK = 2000
# Reading every source's word costs about 0.25 ms of this process's CPU a solution of six steps
# (a 50,000-solution pool with every source: 12.5 s of CPU in all, 2.5 s for its newest 10,000),
# plus the database's time. The newest 10,000 (60,000 steps) keep the page to a few seconds and
# give each pair's κ more steps than it needs; a finer breakdown is where the counts run thin.
MAX_SOLUTIONS = 10_000
SHOWN_DISAGREEMENTS = 20


@dataclass
class Figures:
    """One pair's agreement over some steps (κ) and solutions (first errors)."""

    steps: StepTable = field(default_factory=StepTable)
    first_errors: FirstErrorTally = field(default_factory=FirstErrorTally)


@dataclass
class PairAgreement:
    """Two sources' agreement, overall, by the step's position and by the solution's origin."""

    pair: tuple[str, str]
    overall: Figures = field(default_factory=Figures)
    by_position: dict[str, StepTable] = field(default_factory=lambda: {b: StepTable() for b in POSITION_BUCKETS})
    by_origin: dict[str, Figures] = field(default_factory=lambda: defaultdict(Figures))

    @property
    def positions(self) -> list[StepTable]:
        """The tables in POSITION_BUCKETS' order (the page's columns)."""
        return [self.by_position[bucket] for bucket in POSITION_BUCKETS]

    def count(self, said: Sequence[dict[str, bool | None]], first_errors: dict[str, tuple[bool, int | None]],
              origin: str) -> None:
        """Add one solution: its steps' verdicts, and each source's first error (`first_error_said`)."""
        a, b = self.pair
        by_origin = self.by_origin[origin]
        for index, verdicts in enumerate(said):
            a_good, b_good = verdicts[a], verdicts[b]
            if a_good is not None and b_good is not None:
                for table in (self.overall.steps, by_origin.steps, self.by_position[position_bucket(index)]):
                    table.add(a_good, b_good)
        (a_said, a_first), (b_said, b_first) = first_errors[a], first_errors[b]
        if a_said and b_said:
            self.overall.first_errors.add(a_first, b_first)
            by_origin.first_errors.add(a_first, b_first)


@dataclass(frozen=True)
class Disagreement:
    """A solution the sources disagree on: `score` pairs of sources differ, summed over its steps."""

    solution_id: int
    origin: str
    score: int
    steps: tuple[StepSources, ...]
    annotation_id: int | None = None  # its newest submitted annotation: the review page to open

    @property
    def disputed(self) -> list[tuple[int, dict[str, bool | None]]]:
        """(step number from 1, each source's verdict) of the steps where some pair differs."""
        return [(step.index + 1, said) for step in self.steps if sources.disagreeing_pairs(said := step.verdicts())]


@dataclass
class PoolAgreement:
    model: ModelVersion | None
    solutions: int  # solutions considered
    capped: bool  # more were labeled than MAX_SOLUTIONS: the newest were considered
    pairs: list[PairAgreement]
    disagreements: list[Disagreement]

    @property
    def by_origin(self) -> list[tuple[str, list[tuple[tuple[str, str], Figures]]]]:
        """(a solution origin, each pair's figures there), origins in name order: the page's breakdown."""
        origins = sorted({origin for pair in self.pairs for origin in pair.by_origin})
        return [(origin, [(pair.pair, pair.by_origin.get(origin, Figures())) for pair in self.pairs])
                for origin in origins]


def pool_agreement(*, project: Project, limit: int = MAX_SOLUTIONS, chunk_size: int = CHUNK,
                   shown: int = SHOWN_DISAGREEMENTS) -> PoolAgreement:
    """Every pair of sources' agreement over the project's newest `limit` labeled solutions, and the
    `shown` solutions they disagree on most."""
    model = registry.current_model(project)
    ids = labeled_solution_ids(project, limit=limit + 1)
    pairs = [PairAgreement(pair) for pair in sources.PAIRS]
    worst: list[tuple[int, int, Disagreement]] = []  # a min-heap: the least disagreement is dropped first
    for start in range(0, min(len(ids), limit), chunk_size):
        chunk = ids[start:min(start + chunk_size, limit)]
        origins = dict(Solution.objects.filter(pk__in=chunk).values_list("pk", "source"))
        for solution_id, steps in sources.for_solutions(chunk, prm=step_ps(chunk, model)).items():
            said = [step.verdicts() for step in steps]  # read once: each verdict is asked of it many times
            first_errors = {source: sources.first_error_said([v[source] for v in said]) for source in SOURCES}
            for pair in pairs:
                pair.count(said, first_errors, origins[solution_id])
            score = sum(map(sources.disagreeing_pairs, said))
            if score and (len(worst) < shown or (score, solution_id) > worst[0][:2]):
                _keep(worst, Disagreement(solution_id, origins[solution_id], score, tuple(steps)), shown)
    return PoolAgreement(model=model, solutions=min(len(ids), limit), capped=len(ids) > limit, pairs=pairs,
                         disagreements=_with_reviews(sorted(worst, reverse=True)))


def labeled_solution_ids(project: Project, *, limit: int) -> list[int]:
    """The project's newest `limit` solutions that a person (a trainable annotation), a rollout run
    or a judge labeled: those where two sources can meet (the PRM scores every solution)."""
    annotated = Annotation.objects.trainable().filter(solution_id=OuterRef("pk"))
    rolled = AutoStepLabel.objects.rollouts().filter(step__solution_id=OuterRef("pk"))
    judged = AutoStepLabel.objects.judged().filter(step__solution_id=OuterRef("pk"))
    labeled = Solution.objects.filter(project=project).filter(Q(Exists(annotated)) | Q(Exists(rolled))
                                                              | Q(Exists(judged)))
    return list(labeled.order_by("-pk").values_list("pk", flat=True)[:limit])


def step_ps(solution_ids: Sequence[int], model: ModelVersion | None) -> dict[int, list[float | None]]:
    """solution id -> the model's P(step right) per step in order (None: that step not scored)."""
    found: dict[int, dict[int, float]] = defaultdict(dict)
    if model is not None:
        for solution_id, index, p in StepScore.objects.filter(model_version=model, step__solution_id__in=solution_ids) \
                .values_list("step__solution_id", "step__index", "p"):
            found[solution_id][index] = p
    return {solution_id: [ps.get(i) for i in range(max(ps) + 1)] for solution_id, ps in found.items()}


def _keep(worst: list[tuple[int, int, Disagreement]], found: Disagreement, shown: int) -> None:
    heapq.heappush(worst, (found.score, found.solution_id, found))
    if len(worst) > shown:
        heapq.heappop(worst)


def _with_reviews(worst: list[tuple[int, int, Disagreement]]) -> list[Disagreement]:
    """The disagreements, most first, each with its newest submitted annotation's id."""
    ids = [found.solution_id for _, _, found in worst]
    newest = dict(Annotation.objects.submitted().filter(solution_id__in=ids).order_by("solution_id", "pk")
                  .values_list("solution_id", "pk"))
    return [Disagreement(found.solution_id, found.origin, found.score, found.steps, newest.get(found.solution_id))
            for _, _, found in worst]
