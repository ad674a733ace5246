"""What an import format is (`ImportFormat`), what every format parses a line into (`Record`), and
the field readers the parsers share, each raising a `LineError` that names the field at fault."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, Protocol, overload

from annotate.models import Problem, Solution
from annotate.pool import prm800k
from annotate.pool.prm800k import LineError
from steps import splitting
from steps.splitting import SplitMode


@dataclass(frozen=True)
class ImportedLabels:
    """A dataset's own step labels: per step P(good) (None: not labeled), and their provenance.

    `kind` is "automatic" (estimated, e.g. by Math-Shepherd's rollouts) or "gold" (experts')."""

    dataset: str
    kind: str
    soft: tuple[float | None, ...]


@dataclass
class Record:
    """One parsed line, in the pool's terms, ready to be written."""

    line_no: int
    statement: str
    ground_truth_answer: str | None
    ground_truth_solution: str | None
    steps: list[str]
    final_answer: str | None
    is_reference: bool = False
    source: str = ""
    split: str = ""
    generator: str = ""
    meta: dict = field(default_factory=dict)
    pre_generated_answer: str | None = None
    pre_generated_verifier_score: float | None = None
    labels: prm800k.ParsedLine | None = None
    is_correct: bool | None = None
    grading_note: str = ""  # how is_correct was reached, when an admin should know (set with it)
    imported_labels: ImportedLabels | None = None
    # The dataset's own verdict on the final answer, used when there is no ground truth to grade by.
    given_is_correct: bool | None = None

    @cached_property
    def problem_hash(self) -> str:
        return Problem.hash_for(self.statement, self.ground_truth_answer)

    @cached_property
    def solution_hash(self) -> str:
        return Solution.hash_for(self.problem_hash, self.steps)


class LineParser(Protocol):
    """One decoded line (a JSON object) of a format into a Record, or a LineError."""

    def __call__(self, obj: dict, line_no: int, *, split_mode: SplitMode = ...) -> Record: ...


@dataclass(frozen=True)
class ImportFormat:
    """One import format: what the upload page, the command, the API and detection know of it. A
    new format is a module that builds one and a line in the registry
    (`annotate.pool.importing.formats`)."""

    name: str
    help: str  # one line for the upload page: what a line looks like, what it brings
    parse: LineParser
    detect: Callable[[dict], bool]  # whether a file's first object looks like one of its lines
    # `auto` tries the formats by rank, lowest first: one whose lines another's may look like
    # (MATH's {"problem", "solution"}) ranks after it.
    detect_rank: int

    @property
    def choice(self) -> str:
        return f"{self.name}: {self.help}"


@overload
def text_of(obj: dict, key: str, *, required: Literal[True] = True, max_length: int | None = None) -> str: ...
@overload
def text_of(obj: dict, key: str, *, required: bool, max_length: int | None = None) -> str | None: ...
def text_of(obj: dict, key: str, *, required: bool = True, max_length: int | None = None) -> str | None:
    """The line's string at `key` (None when optional and absent)."""
    if key not in obj or obj[key] is None:
        if required:
            raise LineError(key, "is missing")
        return None
    return prm800k.require_str(obj[key], key, max_length=max_length, allow_empty=not required)


def one_of(obj: dict, keys: tuple[str, str]) -> str:
    """The first of two keys the line has."""
    for key in keys:
        if key in obj:
            return key
    raise LineError(keys[0], f"is missing (expected '{keys[0]}' or '{keys[1]}')")


def steps_of(obj: dict, text: str | None, split_mode: SplitMode) -> list[str]:
    """The line's own ``steps`` list when it has one, else its solution `text` split in `split_mode`."""
    if "steps" in obj:
        steps = obj["steps"]
        if not isinstance(steps, list) or not steps:
            raise LineError("steps", f"must be a non-empty list of strings, got {prm800k.type_name(steps)}")
        for i, step in enumerate(steps):
            if not isinstance(step, str) or not step.strip():
                raise LineError(f"steps[{i}]", f"must be a non-empty string, got {prm800k.type_name(step)}")
        return steps
    if split_mode == "explicit":
        raise LineError("steps", "is missing (split mode 'explicit' takes every line's steps as a list)")
    return splitting.split_steps(text or "", split_mode)
