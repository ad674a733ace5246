"""How big a solution Stepwise takes: how many steps, and how many characters in one step.

One rule for every way a solution comes in, imports (each line of a file) and ``POST /api/score``
(sent ``steps`` or a split ``completion``), so a solution that imports can be scored through the
API and the other way round. Every step is rendered on each labeling click and scored as one
sequence: a 10,000-step solution made 18 MB per click, an 80k-character step took minutes to score.

The numbers are site-wide settings read from the environment at start-up
(``STEPWISE_IMPORT_MAX_STEPS``, ``STEPWISE_IMPORT_MAX_STEP_CHARS``; the defaults are here);
readers build ``SolutionLimits.of(settings)`` when they check, so a test's override reaches them.
Django-free: the settings object is anything with those attributes.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAX_STEPS = 200
MAX_STEP_CHARS = 10_000
# The settings (and environment variables) that change them.
STEPS_SETTING = "STEPWISE_IMPORT_MAX_STEPS"
STEP_CHARS_SETTING = "STEPWISE_IMPORT_MAX_STEP_CHARS"


class TooBig(ValueError):
    """A solution over a limit: `field` names where (``steps``, ``steps[3]``), `message` what and which limit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class SolutionLimits:
    max_steps: int = MAX_STEPS
    max_step_chars: int = MAX_STEP_CHARS

    @classmethod
    def of(cls, settings: object) -> SolutionLimits:
        """The limits a settings object holds (Django's `settings`), the defaults where it holds none."""
        return cls(int(getattr(settings, STEPS_SETTING, MAX_STEPS)),
                   int(getattr(settings, STEP_CHARS_SETTING, MAX_STEP_CHARS)))

    def steps_message(self, count: int) -> str | None:
        """Why `count` steps are too many; None when they are not."""
        if count <= self.max_steps:
            return None
        return f"has {count:,} steps; the limit is {self.max_steps:,} ({STEPS_SETTING})"

    def chars_message(self, text: str) -> str | None:
        """Why one step's `text` is too long; None when it is not."""
        if len(text) <= self.max_step_chars:
            return None
        return f"has {len(text):,} characters; the limit is {self.max_step_chars:,} ({STEP_CHARS_SETTING})"

    def check(self, steps: Sequence[str], *, field: str = "steps", others: Iterable[tuple[str, str]] = ()) -> None:
        """Raise TooBig for the first thing over a limit: the number of `steps`, then each step's text
        (named ``field[i]``), then each of `others` ((field, text) pairs: texts held to the step limit,
        such as a PRM800K line's alternative completions)."""
        too_many = self.steps_message(len(steps))
        if too_many:
            raise TooBig(field, too_many)
        for where, text in [*((f"{field}[{i}]", text) for i, text in enumerate(steps)), *others]:
            too_long = self.chars_message(text)
            if too_long:
                raise TooBig(where, too_long)
