"""The one compute account every search method spends from: generated tokens and PRM calls.

A method asks the account before each generator or PRM call. A generator call is allowed
only when its worst case (every sample writing `max_tokens`) fits in what is left, so the
total can never pass the budget whatever the generator writes; a method that is refused
stops and returns the best it has. Prompt tokens are recorded but not budgeted: they are
read, not generated (and a server with prefix caching reads them once).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scoring.core.prm import StepProbability
from scoring.generation.generators import Generator, Sample, SamplingParams

# (problem, steps) -> one StepProbability per step: LoadedPRM.step_probabilities for one item.
Scorer = Callable[[str, Sequence[str]], list[StepProbability]]


class BudgetExhausted(Exception):
    """The next call would pass the budget; the method stops with what it has."""


@dataclass(frozen=True)
class Budget:
    """Caps on generated tokens and on PRM calls (None: no cap). No method exceeds them."""

    max_tokens: int | None = None
    max_prm_calls: int | None = None

    def __post_init__(self):
        for name in ("max_tokens", "max_prm_calls"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"budget {name} must be at least 1 (or unset), not {value}")


@dataclass
class Compute:
    """What one search spent, checked against its budget before every call."""

    budget: Budget = field(default_factory=Budget)
    generated_tokens: int = 0
    prompt_tokens: int = 0
    generator_calls: int = 0
    samples: int = 0
    prm_calls: int = 0

    def tokens_left(self) -> int | None:
        cap = self.budget.max_tokens
        return None if cap is None else cap - self.generated_tokens

    def prm_calls_left(self) -> int | None:
        cap = self.budget.max_prm_calls
        return None if cap is None else cap - self.prm_calls

    def samples_that_fit(self, wanted: int, max_tokens: int) -> int:
        """How many of `wanted` samples of up to `max_tokens` each the token budget still allows."""
        left = self.tokens_left()
        return wanted if left is None else max(0, min(wanted, left // max_tokens))

    def generate(self, generator: Generator, prompts: Sequence[str], params: SamplingParams) -> list[list[Sample]]:
        """`generator.generate`, refused (BudgetExhausted) unless its worst case fits."""
        wanted = len(prompts) * params.n
        if not wanted:
            return []
        if self.samples_that_fit(wanted, params.max_tokens) < wanted:
            raise BudgetExhausted(f"{wanted} samples of up to {params.max_tokens} tokens do not fit "
                                  f"in the {self.tokens_left()} tokens left")
        rows = generator.generate(list(prompts), params)
        self.generator_calls += 1
        for row in rows:
            self.samples += len(row)
            self.generated_tokens += sum(s.completion_tokens for s in row)
            self.prompt_tokens += row[0].prompt_tokens if row else 0
        return rows

    def score(self, scorer: Scorer, problem: str, steps: Sequence[str]) -> list[StepProbability]:
        """One PRM call on one partial or complete solution, refused past the budget."""
        left = self.prm_calls_left()
        if left is not None and left < 1:
            raise BudgetExhausted(f"the budget of {self.budget.max_prm_calls} PRM calls is spent")
        self.prm_calls += 1
        return list(scorer(problem, list(steps)))

    def as_dict(self) -> dict:
        return {
            "generated_tokens": self.generated_tokens, "prompt_tokens": self.prompt_tokens,
            "generator_calls": self.generator_calls, "samples": self.samples, "prm_calls": self.prm_calls,
            "budget": {"max_tokens": self.budget.max_tokens, "max_prm_calls": self.budget.max_prm_calls},
        }


def prm_scorer(prm) -> Scorer:
    """The scorer of a LoadedPRM: one solution, one forward pass."""
    def score(problem: str, steps: Sequence[str]) -> list[StepProbability]:
        return prm.step_probabilities([(problem, list(steps))])[0]

    return score
