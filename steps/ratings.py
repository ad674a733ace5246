"""A step's rating, the one definition: PRM800K's three values and what each means to a reader.

-1 the step is wrong (an error: the first one ends a found_error task), 0 it is reasonable but
moves nothing forward, +1 it is right and useful. Every place that reads or writes a rating
(labeling, review, gold labels, verdicts, first errors, exports, training rows, PRM800K lines,
the database's choices and check, the labeling page's buttons and keys) goes through `Rating`,
so another scale or verdict is a change here. An unrated step is None, never a fourth value.

Django-free (plain Python, checked with mypy's strict flags): the models take `CHOICES`.
"""
from __future__ import annotations

import enum


class Rating(enum.IntEnum):
    """A rating as stored and sent: an int (JSON, the database, forms), compared as one."""

    NEGATIVE = -1
    NEUTRAL = 0
    POSITIVE = 1

    @property
    def word(self) -> str:
        """How the pages name it: wrong, neutral, good."""
        return _WORDS[self]

    @property
    def is_error(self) -> bool:
        """Whether the step is wrong: what a first error is, and what ends a found_error task."""
        return self is Rating.NEGATIVE


_WORDS = {Rating.NEGATIVE: "wrong", Rating.NEUTRAL: "neutral", Rating.POSITIVE: "good"}
# In order from worst to best; the values a column, a form or a line may hold.
RATINGS: tuple[Rating, ...] = tuple(Rating)
VALUES: frozenset[int] = frozenset(int(rating) for rating in Rating)
# The choices of a model field holding a rating (Django's (value, label) pairs).
CHOICES: list[tuple[int, str]] = [(int(rating), rating.word) for rating in Rating]
ALLOWED = ", ".join(str(int(rating)) for rating in Rating)  # "-1, 0, 1", as messages name them


class InvalidRating(ValueError):
    """Not a rating: the message says what was given and what is allowed."""


def is_rating(value: object) -> bool:
    """Whether `value` is one of the ratings (an int, never a bool: JSON's true is not +1)."""
    return isinstance(value, int) and not isinstance(value, bool) and value in VALUES


def parse(value: object) -> Rating:
    """`value` as a Rating; InvalidRating naming it when it is none (bools, floats and strings included)."""
    if not is_rating(value):
        raise InvalidRating(f"must be one of {ALLOWED}, not {value!r}")
    return Rating(value)  # type: ignore[arg-type]  # is_rating checked it is an int


def parse_optional(value: object) -> Rating | None:
    """`parse`, with None (unrated) passed through."""
    return None if value is None else parse(value)


def is_error(rating: int | None) -> bool:
    """Whether a stored rating (None: unrated) says the step is wrong."""
    return rating is not None and rating == Rating.NEGATIVE


def is_good(rating: int | None, *, neutral_is_good: bool) -> bool:
    """Whether a rating counts as a good step for a binary label: +1, and 0 when `neutral_is_good`
    (PRM800K's 0 is "reasonable but no progress"; most PRM trainers count it good)."""
    return rating == Rating.POSITIVE or (rating == Rating.NEUTRAL and neutral_is_good)
