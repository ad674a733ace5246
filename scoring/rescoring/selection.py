"""Which solutions annotators see next, after each rescore: a new generation of the queue.

The policy mixes reasons with configurable shares:
  convincing_wrong  graded wrong yet rated highly by the PRM: where its errors hide (PRM800K);
  convincing        other highly rated solutions, so labels keep the true base rate;
  uncertain         the widest sigma, when the head is distributional;
  random            a uniform sample: a prototype with a weak PRM did worse than random
                    with convincing-wrong alone (96 % wrong answers, skewed base rate).
With an ensemble's epistemic uncertainty (scoring/rescoring/ensemble.py, passed to rebuild_queue):
  disagreement               the members disagree most on some step's score;
  first_error_disagreement   the members disagree most on where the first error is;
  uncertain_convincing_wrong graded wrong with the highest upper-quantile PRM score: wrong
                             answers that some plausible head still finds convincing.
Without the ensemble these three have no candidates and their share goes to random.
With rollout labels (Math-Shepherd, OmegaPRM: scoring/generation/rollout_labeling.py):
  rollout_disagreement       the latest rollout run's soft labels (share of continuations that
                             reach the answer) are furthest from this version's step scores, up
                             to the first error either side sees (`rollout_disagreement`).
Solutions without rollout labels are not ranked by it; with none in the pool its share goes to random.
With a judge's verdicts as well (a verifier model: annotate.labeling.sources says what each source's
verdict on a step is):
  sources_disagree           the machine sources (the latest judge run, the latest rollout run's hard
                             label, this version's step score >= 0.5) place the first error furthest
                             apart, in steps; ties by the widest gap between their probabilities on a
                             step up to the first error any sees (`sources.disagreement`).
A solution needs two machine sources on some step to be ranked by it; with none such, its share goes to random.
Reasons are interleaved in proportion to their shares (the best convincing wrong answer is
served first), each problem appears at most `per_problem` times, and quality-control and
screening items are left alone: the labeling side serves those at claim time.

Unscored solutions (imported while a rescore ran) are candidates too, ranked after every
scored one: wrong answers by grading first under convincing_wrong, and in the random share;
otherwise a rebuild would retire the queue items their import gave them.
"""
from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby, islice
from operator import itemgetter
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery

from annotate.labeling import queueing, sources
from annotate.models import AutoStepLabel, Generation, LabelingConfig, Project, QueueItem, Solution
from infra import env
from scoring.models import ModelVersion, SolutionScore, StepScore

if TYPE_CHECKING:
    from scoring.rescoring.ensemble import SolutionUncertainty

# The reasons are QueueItem.Reason, the queue column's choices (annotate may not import this
# app, and both sides write reasons); which of them selection gives, in tie-breaking order, is
# decided here, and only these may have a share (STEPWISE_SELECTION_SHARES).
Reason = QueueItem.Reason
REASONS: tuple[Reason, ...] = (
    Reason.CONVINCING_WRONG, Reason.CONVINCING, Reason.UNCERTAIN, Reason.RANDOM, Reason.DISAGREEMENT,
    Reason.FIRST_ERROR_DISAGREEMENT, Reason.UNCERTAIN_CONVINCING_WRONG, Reason.ROLLOUT_DISAGREEMENT,
    Reason.SOURCES_DISAGREE,
)
# Those that need an ensemble's uncertainty (scoring/rescoring/ensemble.py).
ENSEMBLE_REASONS = {Reason.DISAGREEMENT, Reason.FIRST_ERROR_DISAGREEMENT, Reason.UNCERTAIN_CONVINCING_WRONG}
SHARES_SETTING = "STEPWISE_SELECTION_SHARES"
# Solutions whose sources are read together (three queries a chunk): memory stays bounded in any pool.
SOURCES_CHUNK = 1000


def parse_shares(text: str) -> dict[str, float]:
    """'convincing_wrong=0.4,random=0.6' -> shares of selection's reasons, normalised to sum 1;
    ValueError naming the bad part (an unknown reason among them)."""
    return env.parse_shares(text, REASONS)


def check_shares_setting(shares: Mapping[str, float]) -> None:
    """ImproperlyConfigured naming STEPWISE_SELECTION_SHARES when a share names no selection
    reason. The settings parse the numbers at start-up without knowing the reasons (they are
    this app's); the app checks the names when it is ready, still before any process serves."""
    unknown = [name for name in shares if name not in REASONS]
    if unknown:
        raise ImproperlyConfigured(f"{SHARES_SETTING}: unknown reason {unknown[0]!r} (use {', '.join(REASONS)})")


@dataclass(kw_only=True)
class Policy:
    size: int
    shares: dict[str, float]
    per_problem: int
    # The solution score that says "convincing": P(all steps good) as in PRM800K.
    score: str = "product"
    seed: int | None = None

    @classmethod
    def of(cls, project: Project | int, *, size: int | None = None, shares: dict[str, float] | None = None,
           per_problem: int | None = None, score: str = "product", seed: int | None = None) -> Policy:
        """The project's policy (its settings' queue size, per-problem cap and selection shares),
        with those given here in place of its settings."""
        config = LabelingConfig.of(project)
        return cls(size=config.queue_size if size is None else size,
                   shares=dict(config.selection_shares) if shares is None else shares,
                   per_problem=config.queue_per_problem if per_problem is None else per_problem,
                   score=score, seed=seed)


@dataclass
class Candidate:
    solution_id: int
    problem_id: int
    is_correct: bool | None
    score: float | None  # None: not scored by this model yet
    sigma: float | None
    # Epistemic: from an ensemble (scoring/rescoring/ensemble.py); None without one.
    spread: float | None = None
    first_error_disagreement: float | None = None
    upper_score: float | None = None
    # From the latest rollout label run (`rollout_disagreement`); None without one.
    rollout_disagreement: float | None = None
    # From the latest judge and rollout runs and this version's step scores (`sources_disagree`);
    # None without two of them on some step.
    sources_disagreement: sources.Disagreement | None = None


@dataclass
class Pick:
    candidate: Candidate
    reason: Reason


def candidates(*, model_version: ModelVersion, project: Project | None = None, score: str = "product",
               uncertainty: Mapping[int, SolutionUncertainty] | None = None,
               sources_disagree: bool = True) -> list[Candidate]:
    """Unlabeled solutions of the project's pool that nobody is labeling or has labeled: scored,
    then unscored. `sources_disagree=False` skips reading every machine source (a policy without
    that reason's share has no use for it)."""
    project = Project.objects.given(project)
    busy = QueueItem.objects.filter(
        project=project, status__in=[QueueItem.Status.LEASED, QueueItem.Status.DONE]).values("solution_id")
    solutions = (Solution.objects.unlabeled().filter(project=project, is_gold=False, is_reference=False)
                 .exclude(pk__in=busy))
    scores = SolutionScore.objects.filter(model_version=model_version)
    rows = scores.filter(solution_id__in=solutions.values("pk")).values_list(
        "solution_id", "solution__problem_id", "solution__is_correct", score, "sigma"
    )
    unscored = solutions.exclude(pk__in=scores.values("solution_id")).values_list("pk", "problem_id", "is_correct")
    pool = [Candidate(*row) for row in rows.order_by("solution_id").iterator(chunk_size=2000)] + [
        Candidate(pk, problem_id, is_correct, score=None, sigma=None)
        for pk, problem_id, is_correct in unscored.order_by("pk").distinct().iterator(chunk_size=2000)
    ]
    pool = with_uncertainty(pool, uncertainty or {})
    by_rollouts = rollout_disagreements(solutions=solutions, model_version=model_version)
    for candidate in pool:
        candidate.rollout_disagreement = by_rollouts.get(candidate.solution_id)
    if sources_disagree:
        by_sources = sources_disagreements(solutions=solutions, model_version=model_version)
        for candidate in pool:
            candidate.sources_disagreement = by_sources.get(candidate.solution_id)
    return pool


def with_uncertainty(pool: list[Candidate], uncertainty: Mapping[int, SolutionUncertainty]) -> list[Candidate]:
    for candidate in pool:
        u = uncertainty.get(candidate.solution_id)
        if u is not None:
            candidate.spread, candidate.upper_score = u.spread, u.upper_score
            candidate.first_error_disagreement = u.first_error_disagreement
    return pool


def rollout_disagreement(rollout: Sequence[float], ps: Sequence[float]) -> float:
    """How far the PRM is from the rollouts where both could still call the prefix right: the
    largest |soft label - p| up to the earlier of their two first errors (past an error every
    rollout fails, while a step-local PRM rightly rates later steps good: not a disagreement).

    `rollout` holds each step's soft label (share of continuations reaching the answer; a step
    none reached is Math-Shepherd's first error), `ps` the PRM's P(step good), in step order.
    """
    prm_first = next((i for i, p in enumerate(ps) if p < 0.5), len(ps))
    rollout_first = next((i for i, soft in enumerate(rollout) if soft == 0.0), len(ps))
    end = min(rollout_first, prm_first)
    return max((abs(r - p) for r, p in list(zip(rollout, ps))[: end + 1]), default=0.0)


def rollout_disagreements(*, solutions: QuerySet[Solution], model_version: ModelVersion) -> dict[int, float]:
    """Solution id -> `rollout_disagreement` of its latest rollout run against this version's step
    scores, in one query over the solutions' rollout labels. A solution with a step this version
    has not scored gets none: the two lists must describe the same steps."""
    p = StepScore.objects.filter(step=OuterRef("step"), model_version=model_version).values("p")[:1]
    rows = (
        AutoStepLabel.objects.rollouts().filter(step__solution__in=solutions.values("pk"))
        .annotate(p=Subquery(p))
        # Per solution, the latest run's labels come first, in step order.
        .order_by("step__solution_id", "-run__created_at", "-run_id", "step__index")
        .values_list("step__solution_id", "run_id", "soft", "p")
    )
    out: dict[int, float] = {}
    for solution_id, labels in groupby(rows.iterator(chunk_size=5000), key=itemgetter(0)):
        value = _latest_run_disagreement(labels)
        if value is not None:
            out[solution_id] = value
    return out


def _latest_run_disagreement(labels: Iterable[tuple[int, int, float, float | None]]) -> float | None:
    rows = list(labels)
    latest = [(soft, p) for _, run_id, soft, p in rows if run_id == rows[0][1]]
    if any(p is None for _, p in latest):
        return None
    return rollout_disagreement([soft for soft, _ in latest], [p for _, p in latest if p is not None])


def sources_disagreements(*, solutions: QuerySet[Solution],
                          model_version: ModelVersion) -> dict[int, sources.Disagreement]:
    """Solution id -> `sources.disagreement` of the machine sources on it, for the solutions with a
    rollout or judge label (only the PRM: one source, nothing to compare), read in chunks."""
    labeled = ((AutoStepLabel.objects.rollouts() | AutoStepLabel.objects.judged())
               .filter(step__solution__in=solutions.values("pk"))
               .order_by("step__solution_id").values_list("step__solution_id", flat=True).distinct())
    ids = labeled.iterator(chunk_size=SOURCES_CHUNK)
    out: dict[int, sources.Disagreement] = {}
    while chunk := list(islice(ids, SOURCES_CHUNK)):
        words = sources.machine_words(chunk, prm=step_ps(chunk, model_version=model_version))
        for solution_id, steps in words.items():
            found = sources.disagreement(steps)
            if found is not None:
                out[solution_id] = found
    return out


def step_ps(solution_ids: list[int], *, model_version: ModelVersion) -> dict[int, list[float | None]]:
    """Solution id -> this version's P(step right) by step index (None: a step it has not scored)."""
    rows = StepScore.objects.filter(model_version=model_version, step__solution_id__in=solution_ids) \
        .values_list("step__solution_id", "step__index", "p")
    found: dict[int, list[float | None]] = {}
    for solution_id, index, p in rows:
        ps = found.setdefault(solution_id, [])
        ps.extend([None] * (index + 1 - len(ps)))
        ps[index] = p
    return found


def _by_score(candidate: Candidate) -> tuple:
    # Unscored after every scored candidate; in id order among themselves.
    return (candidate.score is None, -(candidate.score or 0.0), candidate.solution_id)


def ranked(pool: list[Candidate], reason: Reason, rng: random.Random) -> list[Candidate]:
    if reason == Reason.CONVINCING_WRONG:
        return sorted((c for c in pool if c.is_correct is False), key=_by_score)
    if reason == Reason.CONVINCING:
        # "Convincing" needs a score: unscored solutions reach the queue through the other reasons.
        return sorted((c for c in pool if c.is_correct is not False and c.score is not None), key=_by_score)
    # Below, `or 0.0` only tells the type checker: the filter leaves no None.
    if reason == Reason.UNCERTAIN:
        return sorted((c for c in pool if c.sigma is not None), key=lambda c: (-(c.sigma or 0.0), c.solution_id))
    if reason == Reason.DISAGREEMENT:
        return sorted((c for c in pool if c.spread is not None), key=lambda c: (-(c.spread or 0.0), c.solution_id))
    if reason == Reason.FIRST_ERROR_DISAGREEMENT:
        return sorted((c for c in pool if c.first_error_disagreement is not None),
                      key=lambda c: (-(c.first_error_disagreement or 0.0), -(c.spread or 0.0), c.solution_id))
    if reason == Reason.ROLLOUT_DISAGREEMENT:
        return sorted((c for c in pool if c.rollout_disagreement is not None),
                      key=lambda c: (-(c.rollout_disagreement or 0.0), c.solution_id))
    if reason == Reason.SOURCES_DISAGREE:
        return sorted((c for c in pool if c.sources_disagreement is not None),
                      key=lambda c: (_more_first(c.sources_disagreement), c.solution_id))
    if reason == Reason.UNCERTAIN_CONVINCING_WRONG:
        return sorted((c for c in pool if c.is_correct is False and c.upper_score is not None),
                      key=lambda c: (-(c.upper_score or 0.0), c.solution_id))
    shuffled = list(pool)
    rng.shuffle(shuffled)
    return shuffled


def _more_first(found: sources.Disagreement | None) -> tuple[int, float]:
    return (0, 0.0) if found is None else (-found.steps, -found.spread)


def select(pool: list[Candidate], policy: Policy) -> list[Pick]:
    """The picks in serving order. Pure: no database, so the policy is easy to test and tune."""
    rng = random.Random(policy.seed)
    # What the cap per problem lets through, so shares are shares of what can really be queued.
    per_problem_counts: dict[int, int] = {}
    for candidate in pool:
        per_problem_counts[candidate.problem_id] = per_problem_counts.get(candidate.problem_id, 0) + 1
    capacity = sum(min(n, policy.per_problem) for n in per_problem_counts.values())
    size = min(policy.size, capacity)
    quotas = {r: round(policy.shares.get(r, 0) * size) for r in REASONS if policy.shares.get(r, 0) > 0}
    chosen: dict[int, str] = {}
    per_problem: dict[int, int] = {}

    def take(candidate: Candidate, reason: Reason) -> bool:
        if len(chosen) >= size or candidate.solution_id in chosen:
            return False
        if per_problem.get(candidate.problem_id, 0) >= policy.per_problem:
            return False
        chosen[candidate.solution_id] = reason
        per_problem[candidate.problem_id] = per_problem.get(candidate.problem_id, 0) + 1
        return True

    lists: dict[Reason, list[Candidate]] = {reason: [] for reason in quotas}
    for reason, quota in quotas.items():
        for candidate in ranked(pool, reason, rng):
            if len(lists[reason]) >= quota:
                break
            if take(candidate, reason):
                lists[reason].append(candidate)
    # Quotas a reason could not fill (no sigma, few wrong answers) go to random picks.
    lists.setdefault(Reason.RANDOM, [])
    for candidate in ranked(pool, Reason.RANDOM, rng):
        if len(chosen) >= size:
            break
        if take(candidate, Reason.RANDOM):
            lists[Reason.RANDOM].append(candidate)
    return interleave(lists)


def interleave(lists: dict[Reason, list[Candidate]]) -> list[Pick]:
    """Merge the reasons so each is spread through the queue in proportion to its size.

    The i-th of n items of a reason sits at i/n; ties go in REASONS order, so the strongest
    convincing wrong answer comes first.
    """
    keyed = [
        ((i / len(items)), REASONS.index(reason), Pick(candidate, reason))
        for reason, items in lists.items()
        for i, candidate in enumerate(items)
    ]
    return [pick for *_, pick in sorted(keyed, key=lambda k: (k[0], k[1]))]


def rebuild_queue(*, model_version: ModelVersion, project: Project | None = None, policy: Policy | None = None,
                  uncertainty: Mapping[int, SolutionUncertainty] | None = None) -> Generation:
    """Start a new generation of the project's queue with this model's picks of the project's pool
    (by the project's policy unless one is given); annotate's queueing writes the items.

    `uncertainty` (solution id -> ensemble.SolutionUncertainty) feeds the ensemble reasons;
    without it they read the version's stored ensemble (`ensemble.for_model_version`: fitted
    once per set of labels, the pool's numbers computed once per solution under it).
    """
    project = Project.objects.given(project)
    policy = policy or Policy.of(project)
    pool = candidates(model_version=model_version, project=project, score=policy.score, uncertainty=uncertainty,
                      sources_disagree=policy.shares.get(Reason.SOURCES_DISAGREE, 0) > 0)
    if uncertainty is None and ENSEMBLE_REASONS & {r for r, share in policy.shares.items() if share > 0}:
        from scoring.rescoring.ensemble import for_model_version  # torch: never imported by the web process

        pool = with_uncertainty(pool, for_model_version(model_version, [c.solution_id for c in pool], project=project))
    picks = select(pool, policy)
    with transaction.atomic():
        generation = queueing.start_generation(project=project, model_version_name=model_version.name)
        queueing.enqueue(
            generation=generation, model_version_name=model_version.name, size=policy.size,
            picks=[(pick.candidate.solution_id, float(len(picks) - rank), pick.reason, pick.candidate.score)
                   for rank, pick in enumerate(picks)],
        )
    return generation
