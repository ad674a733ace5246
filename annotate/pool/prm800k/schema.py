"""The PRM800K line schema: its keys, the parsed types, and the checks of one value.

The checks raise ``LineError`` naming the field at fault, so that every layer above (the
PRM800K parser, the other import formats) reports ``label.steps[3].completions[0].rating``
rather than a bare type error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from steps.answers import extract_answer

QUESTION_KEYS = (
    "problem",
    "ground_truth_solution",
    "ground_truth_answer",
    "pre_generated_steps",
    "pre_generated_answer",
    "pre_generated_verifier_score",
)
LINE_KEYS = (
    "labeler",
    "timestamp",
    "generation",
    "is_quality_control_question",
    "is_initial_screening_question",
    "question",
    "label",
)
LABEL_KEYS = ("steps", "total_time", "finish_reason")
STEP_KEYS = ("completions", "human_completion", "chosen_completion")
COMPLETION_KEYS = ("text", "rating", "flagged")
FINISH_REASONS = ("solution", "found_error", "give_up", "bad_problem")
# Completion keys a line lacked (rare), so the rebuilt completion lacks them too.
ABSENT = "__absent__"


class LineError(ValueError):
    """A line that does not fit the schema; the message names the field."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"field '{field}': {problem}")
        self.field = field


@dataclass
class ParsedCompletion:
    text: str
    rating: int | None
    flagged: bool | None
    extra: dict[str, Any]


@dataclass
class ParsedStep:
    completions: list[ParsedCompletion]
    human_completion: Any
    chosen_completion: int | None
    extra: dict[str, Any]

    def text(self) -> str:
        """The step as continued: chosen completion, else the human one, else completion 0."""
        if self.chosen_completion is not None:
            return self.completions[self.chosen_completion].text
        human = human_text(self.human_completion)
        if human is not None:
            return human
        return self.completions[0].text


@dataclass
class ParsedLine:
    line_no: int
    labeler: str
    timestamp: datetime | None
    generation: int | None
    is_quality_control: bool
    is_initial_screening: bool
    question: dict[str, Any]
    steps: list[ParsedStep]
    total_time_ms: int | None
    finish_reason: str | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def problem(self) -> str:
        return self.question["problem"]

    @property
    def ground_truth_answer(self) -> str | None:
        return self.question.get("ground_truth_answer")

    @property
    def ground_truth_solution(self) -> str | None:
        return self.question.get("ground_truth_solution")

    @property
    def pre_generated_answer(self) -> str | None:
        return self.question.get("pre_generated_answer")

    @property
    def pre_generated_verifier_score(self) -> float | None:
        return self.question.get("pre_generated_verifier_score")

    def solution_steps(self) -> list[str]:
        """Phase 2: the pre-generated steps; phase 1: the labeled trajectory."""
        pre = self.question.get("pre_generated_steps")
        return list(pre) if pre else [step.text() for step in self.steps]

    def final_answer(self) -> str | None:
        return extract_answer("\n\n".join(self.solution_steps())) or self.pre_generated_answer


def format_timestamp(moment: datetime | None) -> str | None:
    """PRM800K's spelling: naive UTC ISO 8601 (``2023-01-22T04:34:27.052924``)."""
    if moment is None:
        return None
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat()


def unknown_keys(obj: dict, known: tuple[str, ...]) -> dict:
    return {key: value for key, value in obj.items() if key not in known}


def human_text(human: Any) -> str | None:
    if isinstance(human, str):
        return human
    if isinstance(human, dict) and isinstance(human.get("text"), str):
        return human["text"]
    return None


def type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def require_type(value: Any, where: str, kind: type, expected: str) -> Any:
    """`value` if it is a `kind`; else a LineError saying what was `expected` and what came."""
    if not isinstance(value, kind):
        raise LineError(where, f"must be {expected}, got {type_name(value)}")
    return value


def require_object(value: Any, where: str) -> dict:
    return require_type(value, where, dict, "an object")


def require_list(value: Any, where: str) -> list:
    return require_type(value, where, list, "a list")


def require_str(value: Any, where: str, *, max_length: int | None = None, allow_empty: bool = True) -> str:
    require_type(value, where, str, "a string")
    if not allow_empty and not value.strip():
        raise LineError(where, "is empty")
    if max_length is not None and len(value) > max_length:
        raise LineError(where, f"is longer than {max_length} characters")
    return value


def require_bool(value: Any, where: str) -> bool:
    return require_type(value, where, bool, "true or false")


def optional_int(value: Any, where: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise LineError(where, f"must be an integer or null, got {type_name(value)}")
    if minimum is not None and value < minimum:
        raise LineError(where, f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise LineError(where, f"must be at most {maximum}, got {value}")
    return value
