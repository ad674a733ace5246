"""The arithmetic of a solution's steps: where its first error is, rated by a person or predicted
by a PRM, and one solution score from its step scores.

Plain Python on plain sequences (lists, tuples, a tensor's ``tolist()``): no Django, no torch,
no numpy, so the labeling side, the exporter, training, evaluation and search all read one
definition. One marker for "no error found": ``None`` (never ``-1``, which is also a rating
and, in Python, the last index).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from steps.ratings import is_error

# How a solution's step scores make its score, by what each asks of the solution: every step
# right (product), as good as its weakest step (min), the PRM's verdict after the last step
# (last), the average step (mean).
AGGREGATIONS = ("product", "min", "last", "mean")
# The mean step score less `lam` times its uncertainty: for distributional (BetaPRM) heads,
# whose steps have a sigma; without sigmas it is the mean.
RISK = "risk"
AGGREGATIONS_WITH_RISK = (*AGGREGATIONS, RISK)


def first_error(ratings: Iterable[int | None]) -> int | None:
    """Index of the first step rated as an error (-1, `ratings.is_error`); None when no step is.
    Unrated steps (None) are passed over."""
    return next((index for index, rating in enumerate(ratings) if is_error(rating)), None)


def predicted_first_error(probabilities: Iterable[float], threshold: float) -> int | None:
    """Index of the first step whose probability of being right is below `threshold` (ProcessBench's
    rule); None when no step is."""
    return next((index for index, probability in enumerate(probabilities) if probability < threshold), None)


def check_aggregation(name: str, choices: Sequence[str] = AGGREGATIONS) -> str:
    """`name` if it is one of `choices` (``AGGREGATIONS_WITH_RISK`` where sigmas are at hand), else ValueError."""
    if name not in choices:
        raise ValueError(f"unknown aggregation {name!r}; expected one of {', '.join(choices)}")
    return name


def aggregate(scores: Sequence[float], how: str, *, sigmas: Sequence[float] | None = None,
              lam: float = 1.0) -> float:
    """One solution score from its step scores (probabilities that each step is right), as `how`
    names: one of ``AGGREGATIONS``, or ``RISK`` = mean(score - lam * sigma).

    A solution with no steps has no score: ValueError, so that each caller says how it ranks one.
    """
    check_aggregation(how, AGGREGATIONS_WITH_RISK)
    if len(scores) == 0:
        raise ValueError("a solution with no steps has no score")
    # Python floats first: a product of float32 scalars would be rounded to float32 at each step.
    values = [float(score) for score in scores]
    if how == RISK:
        uncertainties = [0.0] * len(values) if sigmas is None else [float(sigma) for sigma in sigmas]
        return sum(v - lam * u for v, u in zip(values, uncertainties, strict=True)) / len(values)
    if how == "product":
        return math.prod(values)
    if how == "min":
        return min(values)
    if how == "last":
        return values[-1]
    return sum(values) / len(values)
