"""Automatic step labels by rollouts: Math-Shepherd's full sweep and OmegaPRM's binary search.

Plain functions over a `Generator` (no Django). A step's label comes from its *prefix*, the
problem's prompt followed by the solution's steps up to and including that one: the generator
writes N completions from there, each completion's final answer (read from the prefix and the
completion together, so a prefix that already states its answer keeps it) is graded against
the known answer, and K of the N are right.

- Math-Shepherd rolls out every prefix: hard label K > 0, soft label K / N.
- OmegaPRM assumes the labels are monotone (once a step is wrong, every later prefix is) and
  binary-searches the first prefix with K = 0: about log2(M) prefixes of M. Steps before the
  found error are inferred good, the error and the steps after it inferred bad; only the
  prefixes it rolled out carry counts.

Every result says what it spent (completions, generated tokens) and what the full sweep
would have spent, so the saving is reported, never assumed.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scoring.generation.generators import (
    DEFAULT_PROMPT_TEMPLATE,
    DEFAULT_STEP_DELIMITER,
    Generator,
    Sample,
    SamplingParams,
    render_prompt,
)
from steps.answers import end_of_answer, extract_answer
from steps.grading import grade

METHODS = ("math_shepherd", "omegaprm")


@dataclass(frozen=True)
class RolloutTask:
    """One solution to label: the problem, its known answer and the steps written so far."""

    problem: str
    answer: str
    steps: tuple[str, ...]
    template: str = DEFAULT_PROMPT_TEMPLATE
    delimiter: str = DEFAULT_STEP_DELIMITER

    def prefix_text(self, n_steps: int) -> str:
        """The first `n_steps` steps as the generator continues them: joined, delimiter after."""
        return "".join(step + self.delimiter for step in self.steps[:n_steps])

    def prompt(self, n_steps: int) -> str:
        return render_prompt(self.template, self.problem) + self.prefix_text(n_steps)


@dataclass(frozen=True)
class PrefixRollouts:
    """K of N completions from one prefix reached the known answer, and what they cost."""

    n_steps: int  # the prefix holds steps[:n_steps]; its label is that of step n_steps - 1
    n_rollouts: int
    n_correct: int
    completion_tokens: int
    answers: tuple[str | None, ...] = ()

    @property
    def soft(self) -> float:
        return self.n_correct / self.n_rollouts


@dataclass(frozen=True)
class StepEstimate:
    """What a method says of one step: counts when its prefix was rolled out, else inferred."""

    index: int
    soft: float
    n_rollouts: int | None = None
    n_correct: int | None = None

    @property
    def measured(self) -> bool:
        return self.n_rollouts is not None


@dataclass
class LabelResult:
    """One solution's step estimates, its first error (0-based step index or None) and the cost."""

    method: str
    steps: list[StepEstimate]
    first_error: int | None
    rollouts: int = 0
    tokens: int = 0
    full_sweep_rollouts: int = 0
    measured: dict[int, PrefixRollouts] = field(default_factory=dict)


class RolloutCache:
    """Prefix rollouts by prefix length, so two methods can be compared on the same completions.

    A prefix found here is not generated again; a method still counts the rollouts it used.
    """

    def __init__(self, task: RolloutTask, generator: Generator, params: SamplingParams):
        self.task, self.generator, self.params = task, generator, params
        self.found: dict[int, PrefixRollouts] = {}

    def measure(self, lengths: Sequence[int]) -> list[PrefixRollouts]:
        """Roll out every prefix length not seen yet (one batched call), then return them all."""
        missing = [n for n in dict.fromkeys(lengths) if n not in self.found]
        if missing:
            rows = self.generator.generate([self.task.prompt(n) for n in missing], self.params)
            for n_steps, samples in zip(missing, rows):
                self.found[n_steps] = count_correct(self.task, n_steps, samples)
        return [self.found[n] for n in lengths]


def count_correct(task: RolloutTask, n_steps: int, samples: Sequence[Sample]) -> PrefixRollouts:
    """Grade each completion of one prefix: the first answer the prefix plus the completion states."""
    prefix = task.prefix_text(n_steps)
    answers = tuple(extract_answer(end_of_answer(prefix + sample.text)) for sample in samples)
    correct = sum(1 for answer in answers if grade(answer=answer, truth=task.answer) is True)
    return PrefixRollouts(n_steps=n_steps, n_rollouts=len(samples), n_correct=correct,
                          completion_tokens=sum(s.completion_tokens for s in samples), answers=answers)


def first_error_by_bisection(n_steps: int, k_of: Callable[[int], int]) -> tuple[int | None, list[int]]:
    """OmegaPRM's search: the first prefix length whose K is 0, assuming K > 0 before it.

    `k_of(length)` rolls out the prefix of that many steps and returns K. The empty prefix
    (the bare problem) counts as good, and "past the last step" as bad, so the search ends
    after about log2(n_steps + 1) calls. Returns (first bad step as a 0-based index, or None
    when every step is good; the prefix lengths asked, in order).
    """
    good, bad, asked = 0, n_steps + 1, []
    while bad - good > 1:
        middle = (good + bad) // 2
        asked.append(middle)
        if k_of(middle) > 0:
            good = middle
        else:
            bad = middle
    return (bad - 1 if bad <= n_steps else None), asked


def math_shepherd(task: RolloutTask, cache: RolloutCache) -> LabelResult:
    """Roll out every prefix; each step's label is its own prefix's K of N."""
    measured = {r.n_steps: r for r in cache.measure(range(1, len(task.steps) + 1))}
    steps = [_measured_estimate(measured[i + 1]) for i in range(len(task.steps))]
    first = next((s.index for s in steps if s.n_correct == 0), None)
    return _result("math_shepherd", task, cache, steps, first, measured)


def omegaprm(task: RolloutTask, cache: RolloutCache) -> LabelResult:
    """Binary-search the first error; steps not rolled out are inferred from where it lies."""
    first, asked = first_error_by_bisection(len(task.steps), lambda n: cache.measure([n])[0].n_correct)
    measured = {n: cache.found[n] for n in asked}
    steps = []
    for index in range(len(task.steps)):
        if index + 1 in measured:
            steps.append(_measured_estimate(measured[index + 1]))
        else:
            good = first is None or index < first
            steps.append(StepEstimate(index=index, soft=1.0 if good else 0.0))
    return _result("omegaprm", task, cache, steps, first, measured)


def label_steps(method: str, task: RolloutTask, generator: Generator, params: SamplingParams) -> LabelResult:
    """Label one solution's steps by `method` ("math_shepherd" or "omegaprm")."""
    if method not in METHODS:
        raise ValueError(f"method={method!r}; expected one of {', '.join(METHODS)}")
    if not task.steps:
        raise ValueError("a solution with no steps has nothing to label")
    labeler = math_shepherd if method == "math_shepherd" else omegaprm
    return labeler(task, RolloutCache(task, generator, params))


def _measured_estimate(rollouts: PrefixRollouts) -> StepEstimate:
    return StepEstimate(index=rollouts.n_steps - 1, soft=rollouts.soft,
                        n_rollouts=rollouts.n_rollouts, n_correct=rollouts.n_correct)


def _result(method, task, cache, steps, first, measured) -> LabelResult:
    """The estimates with the rollouts the method used (whether or not the cache had them)."""
    return LabelResult(
        method=method, steps=steps, first_error=first, measured=measured,
        rollouts=sum(r.n_rollouts for r in measured.values()),
        tokens=sum(r.completion_tokens for r in measured.values()),
        full_sweep_rollouts=len(task.steps) * cache.params.n,
    )
