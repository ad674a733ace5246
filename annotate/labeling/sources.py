"""Every label source's word on each step of a solution, side by side: people, rollouts, a judge, the PRM.

The one place that says what each source's verdict on a step is (True: good, False: bad, None:
that source said nothing there), so that the review page, the API, the sources page, the
`sources_disagree` queue reason, second look and the consensus export compare the same things:

- **human**: each trainable annotation's rating of the pool step (`Verdicts.pool_path`: up to
  the annotator's first -1). A neutral 0 counts as good, as exports count it by default. Several
  annotators: the majority; a tie says nothing.
- **rollouts**: the latest rollout run's label of the step, Math-Shepherd's hard rule
  (`AutoStepLabel.hard`: some continuation from the step reached the answer).
- **judge**: the latest judge run's verdict (its probability at least one half), with its critique.
- **prm**: the current model's P(right) at least `PRM_THRESHOLD`, when the caller passes the
  model's scores (the labeling side does not read scoring's tables itself; `assistance.model_ps`
  is the view scoring gives it for one solution).

Imported dataset labels are not a source here: they are someone else's labels of unknown
origin, compared with nothing.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TypeVar

from django.db.models import Subquery

from annotate.labeling import verdicts
from annotate.models import Annotation, AutoStepLabel, Step
from infra import statements
from steps.ratings import is_good

SOURCES = ("human", "rollouts", "judge", "prm")
# Every pair of sources, in SOURCES' order: what the sources page compares.
PAIRS: tuple[tuple[str, str], ...] = tuple(combinations(SOURCES, 2))
# ProcessBench's rule for a PRM's verdict: a step below one half is an error.
PRM_THRESHOLD = 0.5
Word = TypeVar("Word")


@dataclass(frozen=True)
class RolloutWord:
    soft: float
    n_correct: int | None
    n_rollouts: int | None
    good: bool


@dataclass(frozen=True)
class JudgeWord:
    soft: float
    critique: str
    good: bool


@dataclass(frozen=True)
class StepSources:
    """What each source says of one pool step."""

    index: int
    text: str
    human: tuple[int, ...] = ()  # each annotator's rating of this step, in annotation order
    rollout: RolloutWord | None = None
    judge: JudgeWord | None = None
    prm: float | None = None

    def verdict(self, source: str) -> bool | None:
        """The source's verdict on this step: True good, False bad, None nothing said."""
        if source == "human":
            return majority(self.human)
        if source == "rollouts":
            return None if self.rollout is None else self.rollout.good
        if source == "judge":
            return None if self.judge is None else self.judge.good
        if source == "prm":
            return None if self.prm is None else self.prm >= PRM_THRESHOLD
        raise ValueError(f"source {source!r}; expected one of {', '.join(SOURCES)}")

    def verdicts(self) -> dict[str, bool | None]:
        return {source: self.verdict(source) for source in SOURCES}


def majority(ratings: Sequence[int]) -> bool | None:
    """The annotators' verdict: good when more rated it good (0 or +1) than bad (-1); None on a tie."""
    votes = Counter(is_good(rating, neutral_is_good=True) for rating in ratings)
    if votes[True] == votes[False]:
        return None
    return votes[True] > votes[False]


def for_solutions(solution_ids: Iterable[int], *,
                  prm: Mapping[int, Sequence[float | None]] | None = None) -> dict[int, list[StepSources]]:
    """solution id -> its steps in order, each with every source's word (five queries in all).

    `prm`: solution id -> the current model's P(right) per step (scoring reads them); omitted,
    no step has a PRM word.
    """
    ids = list(solution_ids)
    texts: dict[int, list[str]] = defaultdict(list)
    for solution_id, text in Step.objects.filter(solution_id__in=ids).order_by("solution_id", "index") \
            .values_list("solution_id", "text"):
        texts[solution_id].append(text)
    human = human_ratings(ids)
    rollout = latest_words(ids, AutoStepLabel.objects.rollouts(), _rollout_word)
    judge = latest_words(ids, AutoStepLabel.objects.judged(), _judge_word)
    prm = prm or {}
    found = {}
    for solution_id in ids:
        ps = list(prm.get(solution_id, ()))
        found[solution_id] = [
            StepSources(index=i, text=text, human=tuple(human.get(solution_id, {}).get(i, ())),
                        rollout=rollout.get(solution_id, {}).get(i), judge=judge.get(solution_id, {}).get(i),
                        prm=ps[i] if i < len(ps) else None)
            for i, text in enumerate(texts.get(solution_id, []))
        ]
    return found


def human_ratings(solution_ids: list[int]) -> dict[int, dict[int, list[int]]]:
    """solution id -> step index -> the ratings trainable annotations gave that pool step."""
    annotations = Annotation.objects.trainable().filter(solution_id__in=solution_ids)
    finished = {pk: (solution_id, reason) for pk, solution_id, reason
                in annotations.values_list("pk", "solution_id", "finish_reason")}
    found: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for annotation_id, verdict in sorted(verdicts.verdicts_by_annotation(annotations).items()):
        solution_id, finish_reason = finished.get(annotation_id, (None, None))  # None: submitted since
        if solution_id is None or verdict.withheld(finish_reason) is not None:
            continue  # labels no export hands out say nothing here either
        for index, rating in enumerate(verdict.pool_path):
            if rating is not None:
                found[solution_id][index].append(rating)
    return found


def latest_words(solution_ids: list[int], labels, word: Callable[..., Word]) -> dict[int, dict[int, Word]]:
    """solution id -> step index -> the word of the latest run (highest id) that labeled the solution."""
    rows = labels.filter(step__solution_id__in=solution_ids).order_by("step__solution_id", "-run_id", "step__index") \
        .values_list("step__solution_id", "run_id", "step__index", "soft", "n_correct", "n_rollouts", "critique")
    found: dict[int, dict[int, Word]] = {}
    latest_run: dict[int, int] = {}
    for solution_id, run_id, index, soft, k, n, critique in rows:
        if latest_run.setdefault(solution_id, run_id) != run_id:
            continue
        found.setdefault(solution_id, {})[index] = word(soft, k, n, critique)
    return found


def _rollout_word(soft: float, k: int | None, n: int | None, critique: str) -> RolloutWord:
    good = k > 0 if k is not None else soft >= 0.5  # AutoStepLabel.hard
    return RolloutWord(soft=soft, n_correct=k, n_rollouts=n, good=good)


def _judge_word(soft: float, k: int | None, n: int | None, critique: str) -> JudgeWord:
    return JudgeWord(soft=soft, critique=critique, good=soft >= 0.5)


def first_error(step_verdicts: Sequence[bool | None]) -> int | None:
    """The first step a source calls bad, or None when it calls none bad (a gap stops nothing)."""
    return next((i for i, good in enumerate(step_verdicts) if good is False), None)


def first_error_said(step_verdicts: Sequence[bool | None]) -> tuple[bool, int | None]:
    """(whether a source says where a solution's first error is, that step or None for none),
    from its verdict on each step in order.

    A source that calls some step bad says so (`first_error`). One that calls none bad says "no
    error" only when it gave every step a verdict: a judge whose answer covered two steps of
    five, or a person who gave up half way, has not said the rest are right.
    """
    found = first_error(step_verdicts)
    if found is not None:
        return True, found
    return bool(step_verdicts) and None not in step_verdicts, None


def disagreeing_pairs(said: Mapping[str, bool | None]) -> int:
    """How many pairs of sources both gave a step a verdict (`StepSources.verdicts`) and gave
    different ones (0 to 4)."""
    return sum(1 for a, b in PAIRS if said[a] is not None and said[b] is not None and said[a] != said[b])



def consensus(step: StepSources, sources: Sequence[str]) -> bool | None:
    """The verdict every named source gives the step (Qwen's consensus filtering), or None where
    one of them is silent or they differ: such a step keeps no label."""
    said = {step.verdict(source) for source in sources}
    if len(said) != 1 or None in said:
        return None
    return said.pop()


# The sources that are machines: where they disagree, a person's label is worth most (`sources_disagree`).
MACHINE_SOURCES = ("rollouts", "judge", "prm")


def machine_words(solution_ids: Iterable[int], *,
                  prm: Mapping[int, Sequence[float | None]]) -> dict[int, list[StepSources]]:
    """`for_solutions` without the steps' text and the people, for ranking a pool (two queries):
    solution id -> its steps up to the last one a machine source speaks of, each with the word of
    the latest rollout run, the latest judge run and the PRM (`prm` as for_solutions)."""
    ids = list(solution_ids)
    rollouts, judged = AutoStepLabel.objects.rollouts(), AutoStepLabel.objects.judged()
    rollout = latest_words(ids, rollouts, _rollout_word)
    judge = latest_words(ids, judged, _judge_word)
    found = {}
    for solution_id in ids:
        ps = list(prm.get(solution_id, ()))
        said = {**rollout.get(solution_id, {}), **judge.get(solution_id, {})}
        length = max([len(ps), *(index + 1 for index in said)])
        found[solution_id] = [
            StepSources(index=i, text="", rollout=rollout.get(solution_id, {}).get(i),
                        judge=judge.get(solution_id, {}).get(i), prm=ps[i] if i < len(ps) else None)
            for i in range(length)
        ]
    return found


@dataclass(frozen=True, order=True)
class Disagreement:
    """How much some sources disagree on a solution, in the order of "more": first `steps`, the
    steps whose prefix they judge differently (one says an error came by there, another that all
    is right so far): how far apart they place the first error; then `spread`, the widest gap
    between their probabilities on a step, up to the first error any of them sees."""

    steps: int
    spread: float


def disagreement(steps: Sequence[StepSources], sources: Sequence[str] = MACHINE_SOURCES) -> Disagreement | None:
    """How much the sources disagree on a solution; None where no step has the word of two of them.

    Each source is read up to its first error: past it every rollout fails, while a step-local judge
    or PRM may rightly call a later step good, and neither is a disagreement about the solution."""
    said = [[step.verdict(source) for step in steps] for source in sources]
    if not any(sum(verdict is not None for verdict in on_step) >= 2 for on_step in zip(*said)):
        return None
    so_far = [_right_so_far(verdicts) for verdicts in said]
    split = sum(len(set(on_step) - {None}) > 1 for on_step in zip(*so_far))
    firsts = [first for first in map(first_error, said) if first is not None]
    end = min(firsts, default=len(steps))
    gaps = [max(ps) - min(ps) for ps in ([_probability(step, s) for s in sources if step.verdict(s) is not None]
                                         for step in steps[: end + 1]) if len(ps) >= 2]
    return Disagreement(steps=split, spread=max(gaps, default=0.0))


def _right_so_far(verdicts: list[bool | None]) -> list[bool | None]:
    """One source's word on whether all is right up to each step: no from its first error on."""
    first = first_error(verdicts)
    return [False if first is not None and i >= first else verdict for i, verdict in enumerate(verdicts)]


def _probability(step: StepSources, source: str) -> float:
    """A machine source's P(good) of a step it speaks of: the soft label, or the PRM's p."""
    word = step.rollout if source == "rollouts" else step.judge if source == "judge" else None
    p = step.prm if source == "prm" else None if word is None else word.soft
    if p is None:
        raise ValueError(f"{source!r} says nothing of step {step.index}")
    return p


_LATEST_JUDGE_OF_STEP = statements.Compiled(lambda solution_id, index: (
    AutoStepLabel.objects.judged().filter(
        step__solution_id=solution_id, step__index=index,
        run_id=Subquery(AutoStepLabel.objects.judged().filter(step__solution_id=solution_id)
                        .order_by("-run_id").values("run_id")[:1]))
    .values_list("soft", "n_correct", "n_rollouts", "critique")
))


def judge_word(*, solution_id: int, index: int) -> JudgeWord | None:
    """The latest judge run's word on one step (one query, built once per connection: a rating's
    second look reads it on the labeling fast path); None where that run said nothing of it."""
    found = _LATEST_JUDGE_OF_STEP.rows(solution_id=solution_id, index=index)
    return _judge_word(*found[0]) if found else None
