"""What every search method builds and returns: partial and complete solutions, and their scores.

A *path* is the problem's steps so far with the PRM's score of each. Step-level methods
(beam search, MCTS) extend paths one generated step at a time (`stop=[delimiter]`); a step
completes its path when the text so far states a final answer (`extract_answer`), when the
generator has nothing more to write (an empty step: it ended the text), or at `max_steps`.
Whole-solution methods (best-of-N, ACA) split each sample with the importer's splitter.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from scoring.core.prm import StepProbability
from scoring.core.prm import aggregate as aggregate_all
from scoring.generation.generators import DEFAULT_PROMPT_TEMPLATE, DEFAULT_STEP_DELIMITER, render_prompt
from steps import arithmetic
from steps.answers import extract_answer
from steps.splitting import split_steps


@dataclass(frozen=True)
class Path:
    """A partial or complete solution: its steps, the PRM's score of each, and whether it is done."""

    steps: tuple[str, ...] = ()
    scores: tuple[StepProbability, ...] = ()
    complete: bool = False
    tokens: int = 0  # generated tokens spent on these steps

    @property
    def answer(self) -> str | None:
        return extract_answer("\n\n".join(self.steps)) if self.steps else None

    def value(self, aggregation: str) -> float:
        """The solution score the methods rank by; a path without scores ranks last."""
        if not self.scores:
            return float("-inf")
        return arithmetic.aggregate([s.p for s in self.scores], aggregation)

    def sigma(self) -> float | None:
        """Mean step sigma (BetaPRM heads): how unsure the PRM is of this path."""
        return aggregate_all(self.scores)["sigma"] if self.scores else None

    def as_dict(self, aggregation: str) -> dict:
        return {
            "steps": list(self.steps), "answer": self.answer, "complete": self.complete,
            "value": self.value(aggregation) if self.scores else None, "sigma": self.sigma(),
            "scores": [{"p": s.p, "mean": s.mean, "sigma": s.sigma} for s in self.scores],
            "tokens": self.tokens,
        }


@dataclass(frozen=True)
class StepOptions:
    """How step-level methods prompt and cut: the template, the delimiter and per-step limits."""

    template: str = DEFAULT_PROMPT_TEMPLATE
    delimiter: str = DEFAULT_STEP_DELIMITER
    max_step_tokens: int = 128
    max_steps: int = 12
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int | None = None

    def prompt(self, problem: str, steps: Sequence[str]) -> str:
        """The generator's prompt for the next step: the problem's prompt and the steps so far."""
        return render_prompt(self.template, problem) + "".join(step + self.delimiter for step in steps)


@dataclass
class SearchResult:
    """The chosen solution, every finished candidate, the compute spent and why the search ended."""

    method: str
    aggregation: str
    best: Path | None
    candidates: list[Path]
    compute: dict
    stopped: str  # "done" or "budget"
    details: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "method": self.method, "aggregation": self.aggregation, "stopped": self.stopped,
            "solution": self.best.as_dict(self.aggregation) if self.best else None,
            "candidates": len(self.candidates), "compute": self.compute, "details": self.details,
        }


def extended(path: Path, text: str, *, tokens: int, options: StepOptions) -> Path:
    """`path` with one generated step; complete when the step ends the solution (module docstring)."""
    step = text.strip()
    if not step:
        return replace(path, complete=True, tokens=path.tokens + tokens)
    steps = (*path.steps, step)
    done = extract_answer("\n\n".join(steps)) is not None or len(steps) >= options.max_steps
    return Path(steps=steps, scores=path.scores, complete=done, tokens=path.tokens + tokens)


def whole_solution(text: str, *, tokens: int) -> Path:
    """A sampled solution as a complete path (steps split as imports split them), not yet scored."""
    return Path(steps=tuple(s.strip() for s in split_steps(text) if s.strip()), complete=True, tokens=tokens)


def best_path(paths: Sequence[Path], aggregation: str) -> Path | None:
    """The highest-valued path; ties go to the earliest (the order they were generated)."""
    best = None
    for path in paths:
        if best is None or path.value(aggregation) > best.value(aggregation):
            best = path
    return best
