"""How far two label sources agree: Cohen's κ over the steps both labeled, and their first
errors over the solutions both judged.

Plain Python (no Django), so the sources page, a benchmark or a notebook compute the same
figures. Both figures are tallies of counts that can be added to chunk by chunk, so a pool of
a million steps is never held at once: `StepTable` for κ, `FirstErrorTally` for first errors.

A verdict is a bool (True: the step is good). A first error is a step index, or None for "no
error": two sources that both find no error agree, and the distance between first errors is
taken only where both found one (a "no error" has no position to measure from).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Where in a solution a step is, as the sources page breaks κ down: early steps are labeled by
# every source, late ones only by those that go on past a first error.
POSITION_BUCKETS = ("1", "2", "3", "4–5", "6+")


def position_bucket(index: int) -> str:
    """The bucket of the step at 0-based `index`."""
    if index < 3:
        return POSITION_BUCKETS[index]
    return POSITION_BUCKETS[3] if index < 5 else POSITION_BUCKETS[4]


@dataclass
class StepTable:
    """The 2x2 table of two sources' verdicts (a, b) on the steps both labeled."""

    both_good: int = 0
    only_a_good: int = 0
    only_b_good: int = 0
    both_bad: int = 0

    def add(self, a: bool, b: bool) -> None:
        if a and b:
            self.both_good += 1
        elif a:
            self.only_a_good += 1
        elif b:
            self.only_b_good += 1
        else:
            self.both_bad += 1

    @property
    def n(self) -> int:
        return self.both_good + self.only_a_good + self.only_b_good + self.both_bad

    @property
    def observed(self) -> float | None:
        """The share of steps on which the two agree; None with no step."""
        return (self.both_good + self.both_bad) / self.n if self.n else None

    @property
    def kappa(self) -> float | None:
        """Cohen's κ = (p_o − p_e) / (1 − p_e), p_e the agreement expected by chance from each
        source's share of good verdicts. None where it is undefined: no step, or p_e = 1 (both
        sources gave every step the same verdict, so agreement tells nothing)."""
        n = self.n
        a_good, b_good = self.both_good + self.only_a_good, self.both_good + self.only_b_good
        # In counts, times n²: exact, so p_e = 1 is caught without a float compare.
        expected = a_good * b_good + (n - a_good) * (n - b_good)
        if n == 0 or expected == n * n:
            return None
        return (n * (self.both_good + self.both_bad) - expected) / (n * n - expected)


def cohen_kappa(pairs: Iterable[tuple[bool, bool]]) -> float | None:
    """Cohen's κ of two sources' verdicts, one (a, b) pair per step both labeled (`StepTable.kappa`)."""
    table = StepTable()
    for a, b in pairs:
        table.add(a, b)
    return table.kappa


@dataclass
class FirstErrorTally:
    """Two sources' first errors on the solutions both judged: how often they are the same step
    (or both "no error"), and how far apart they are where both found one."""

    solutions: int = 0
    same: int = 0
    both_found: int = 0
    distance_sum: int = 0

    def add(self, a: int | None, b: int | None) -> None:
        self.solutions += 1
        self.same += a == b
        if a is not None and b is not None:
            self.both_found += 1
            self.distance_sum += abs(a - b)

    @property
    def agreement(self) -> float | None:
        """The share of solutions with the same first error (None: none compared)."""
        return self.same / self.solutions if self.solutions else None

    @property
    def mean_distance(self) -> float | None:
        """Mean |i − j| in steps over the solutions where both found an error (None: none did)."""
        return self.distance_sum / self.both_found if self.both_found else None


def first_error_agreement(pairs: Iterable[tuple[int | None, int | None]]) -> float | None:
    """The share of solutions whose two first errors (None: no error) are the same."""
    return _tally(pairs).agreement


def mean_first_error_distance(pairs: Iterable[tuple[int | None, int | None]]) -> float | None:
    """Mean distance in steps between two first errors, over the solutions where both found one."""
    return _tally(pairs).mean_distance


def _tally(pairs: Iterable[tuple[int | None, int | None]]) -> FirstErrorTally:
    tally = FirstErrorTally()
    for a, b in pairs:
        tally.add(a, b)
    return tally
