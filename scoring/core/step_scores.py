"""What a PRM reads and what it returns, without torch: the text of a scored solution, a
step's probability and a solution's aggregate scores.

Local models (`scoring.core.prm`, which re-exports these) and remote ones
(`scoring.store.remote_scorer`) share them, so a worker that only talks to a remote endpoint
never imports torch.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scoring.core.model_files import DEFAULT_SEPARATOR
from steps import arithmetic


@dataclass(frozen=True)
class StepProbability:
    """P(step is good); mean and sigma are set when the head is distributional (beta)."""

    p: float
    mean: float | None = None
    sigma: float | None = None


def build_input(problem: str, steps: Sequence[str], *, separator: str = DEFAULT_SEPARATOR) -> list[str]:
    """The text pieces of one scored solution: the problem, then each step plus separator.

    Scoring and training both tokenize these pieces one by one and concatenate the ids, so
    a step's score position (the last token of its piece) is exact and identical in a
    one-pass and a per-prefix forward.
    """
    return [problem.strip() + "\n\n", *(step.strip() + separator for step in steps)]


def aggregate(probabilities: Sequence[StepProbability]) -> dict[str, float | None]:
    """Solution-level scores from its steps: product, min, last, mean (and mean sigma)."""
    ps = [s.p for s in probabilities]
    if not ps:
        raise ValueError("a solution with no steps has no score")
    sigmas = [s.sigma for s in probabilities if s.sigma is not None]
    scores: dict[str, float | None] = {how: arithmetic.aggregate(ps, how) for how in arithmetic.AGGREGATIONS}
    return scores | {"sigma": sum(sigmas) / len(sigmas) if sigmas else None}
