"""The PRM800K line format, both directions. This module owns the schema.

A line (openai/prm800k, ``data/phase{1,2}_{train,test}.jsonl``)::

    {"labeler", "timestamp", "generation", "is_quality_control_question",
     "is_initial_screening_question",
     "question": {"problem", "ground_truth_solution", "ground_truth_answer",
                  "pre_generated_steps", "pre_generated_answer", "pre_generated_verifier_score"},
     "label": {"steps": [{"completions": [{"text", "rating", "flagged"}],
                          "human_completion", "chosen_completion"}],
               "total_time", "finish_reason"}}

Phase 1 lines have no ``pre_generated_*`` (absent or null); phase 2 lines have them.

- ``parse_line(obj, line_no)`` validates a decoded line and returns a ``ParsedLine``; every
  error names the field (``label.steps[3].completions[0].rating``).
- ``line_for_annotation(annotation)`` rebuilds the line from the database. A line imported
  and rebuilt is the same JSON object (``==``): what the pool rows cannot hold (keys a line
  lacked, values that differ from the shared Problem/Solution rows, unknown keys, the
  timestamp's exact spelling) is remembered in ``Annotation.question_extra``, unknown
  completion keys in ``Completion.extra``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .answers import extract_answer

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
        human = _human_text(self.human_completion)
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


# --- parsing -------------------------------------------------------------------------


def parse_line(obj: Any, line_no: int) -> ParsedLine:
    """Validate one decoded PRM800K line. Raises ``LineError`` naming the bad field."""
    obj = _require_object(obj, "line")
    for key in LINE_KEYS:
        if key not in obj:
            raise LineError(key, "is missing")
    question = _parse_question(_require_object(obj["question"], "question"))
    label = _require_object(obj["label"], "label")
    for key in LABEL_KEYS:
        if key not in label:
            raise LineError(f"label.{key}", "is missing")
    steps = _require_list(label["steps"], "label.steps")
    timestamp, extra = _parse_timestamp(obj["timestamp"])
    for name, unknown in (("line", _unknown(obj, LINE_KEYS)), ("label", _unknown(label, LABEL_KEYS))):
        if unknown:
            extra[name] = unknown
    parsed_steps = [_parse_step(step, f"label.steps[{i}]") for i, step in enumerate(steps)]
    step_extra = {str(i): s.extra for i, s in enumerate(parsed_steps) if s.extra}
    if step_extra:
        extra["steps"] = step_extra
    line = ParsedLine(
        line_no=line_no,
        labeler=_require_str(obj["labeler"], "labeler", max_length=100, allow_empty=False),
        timestamp=timestamp,
        generation=_optional_int(obj["generation"], "generation", minimum=-(2**31), maximum=2**31 - 1),
        is_quality_control=_require_bool(obj["is_quality_control_question"], "is_quality_control_question"),
        is_initial_screening=_require_bool(obj["is_initial_screening_question"], "is_initial_screening_question"),
        question=question,
        steps=parsed_steps,
        total_time_ms=_optional_int(label["total_time"], "label.total_time", minimum=0, maximum=2**63 - 1),
        finish_reason=_parse_finish_reason(label["finish_reason"]),
        extra=extra,
    )
    if not line.solution_steps():
        raise LineError("label.steps", "is empty and the question has no pre_generated_steps")
    return line


def _parse_question(question: dict) -> dict:
    if "problem" not in question:
        raise LineError("question.problem", "is missing")
    _require_str(question["problem"], "question.problem", allow_empty=False)
    for key in ("ground_truth_solution", "ground_truth_answer", "pre_generated_answer"):
        if question.get(key) is not None:
            _require_str(question[key], f"question.{key}")
    steps = question.get("pre_generated_steps")
    if steps is not None:
        for i, step in enumerate(_require_list(steps, "question.pre_generated_steps")):
            _require_str(step, f"question.pre_generated_steps[{i}]")
    score = question.get("pre_generated_verifier_score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
        raise LineError("question.pre_generated_verifier_score", f"must be a number or null, got {_type(score)}")
    return question


def _parse_step(step: Any, where: str) -> ParsedStep:
    step = _require_object(step, where)
    if "completions" not in step:
        raise LineError(f"{where}.completions", "is missing")
    completions = [
        _parse_completion(c, f"{where}.completions[{j}]")
        for j, c in enumerate(_require_list(step["completions"], f"{where}.completions"))
    ]
    chosen = _optional_int(step.get("chosen_completion"), f"{where}.chosen_completion", minimum=0, maximum=2**31 - 1)
    if chosen is not None and chosen >= len(completions):
        raise LineError(f"{where}.chosen_completion", f"is {chosen} but the step has {len(completions)} completions")
    human = step.get("human_completion")
    if human is not None and _human_text(human) is None:
        raise LineError(f"{where}.human_completion", "must be null, a string or an object with a 'text' string")
    if not completions and human is None:
        raise LineError(f"{where}.completions", "is empty and there is no human_completion")
    extra = _unknown(step, STEP_KEYS)
    absent = [key for key in STEP_KEYS[1:] if key not in step]
    if absent:
        extra[ABSENT] = absent
    return ParsedStep(completions=completions, human_completion=human, chosen_completion=chosen, extra=extra)


def _parse_completion(completion: Any, where: str) -> ParsedCompletion:
    completion = _require_object(completion, where)
    if "text" not in completion:
        raise LineError(f"{where}.text", "is missing")
    rating = completion.get("rating")
    if rating is not None and (isinstance(rating, bool) or rating not in (-1, 0, 1)):
        raise LineError(f"{where}.rating", f"must be -1, 0, 1 or null, got {rating!r}")
    flagged = completion.get("flagged")
    if flagged is not None and not isinstance(flagged, bool):
        raise LineError(f"{where}.flagged", f"must be true, false or null, got {_type(flagged)}")
    extra = _unknown(completion, COMPLETION_KEYS)
    absent = [key for key in ("rating", "flagged") if key not in completion]
    if absent:
        extra[ABSENT] = absent
    text = _require_str(completion["text"], f"{where}.text")
    return ParsedCompletion(text=text, rating=rating, flagged=flagged, extra=extra)


def _parse_timestamp(value: Any) -> tuple[datetime | None, dict]:
    if value is None:
        return None, {}
    text = _require_str(value, "timestamp")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise LineError("timestamp", f"is not an ISO 8601 date-time: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # PRM800K writes naive UTC times
    # Kept verbatim when our own spelling of the moment would differ, for exact round trips.
    return moment, ({} if format_timestamp(moment) == text else {"timestamp": text})


def format_timestamp(moment: datetime | None) -> str | None:
    """PRM800K's spelling: naive UTC ISO 8601 (``2023-01-22T04:34:27.052924``)."""
    if moment is None:
        return None
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat()


def _parse_finish_reason(value: Any) -> str | None:
    if value is not None and value not in FINISH_REASONS:
        raise LineError("label.finish_reason", f"must be one of {', '.join(FINISH_REASONS)} or null, got {value!r}")
    return value


def _unknown(obj: dict, known: tuple[str, ...]) -> dict:
    return {key: value for key, value in obj.items() if key not in known}


def _human_text(human: Any) -> str | None:
    if isinstance(human, str):
        return human
    if isinstance(human, dict) and isinstance(human.get("text"), str):
        return human["text"]
    return None


def _type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _require_object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise LineError(where, f"must be an object, got {_type(value)}")
    return value


def _require_list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise LineError(where, f"must be a list, got {_type(value)}")
    return value


def _require_str(value: Any, where: str, *, max_length: int | None = None, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise LineError(where, f"must be a string, got {_type(value)}")
    if not allow_empty and not value.strip():
        raise LineError(where, "is empty")
    if max_length is not None and len(value) > max_length:
        raise LineError(where, f"is longer than {max_length} characters")
    return value


def _require_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise LineError(where, f"must be true or false, got {_type(value)}")
    return value


def _optional_int(value: Any, where: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise LineError(where, f"must be an integer or null, got {_type(value)}")
    if minimum is not None and value < minimum:
        raise LineError(where, f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise LineError(where, f"must be at most {maximum}, got {value}")
    return value


# --- the question as the pool rows give it, and what a line adds to it ----------------


def default_question(*, problem, solution, step_texts: list[str], verifier_score: float | None) -> dict:
    """The `question` object the Problem and Solution rows give, in PRM800K's key order."""
    return {
        "problem": problem.statement,
        "ground_truth_solution": problem.ground_truth_solution,
        "ground_truth_answer": problem.ground_truth_answer,
        "pre_generated_steps": list(step_texts),
        "pre_generated_answer": solution.pre_generated_answer or solution.final_answer,
        "pre_generated_verifier_score": verifier_score,
    }


def question_extra_for(line: ParsedLine, *, problem, solution, step_texts: list[str]) -> dict:
    """What `Annotation.question_extra` must hold so that the line is rebuilt exactly."""
    default = default_question(
        problem=problem, solution=solution, step_texts=step_texts,
        verifier_score=solution.pre_generated_verifier_score,
    )
    extra: dict[str, Any] = dict(line.extra)
    absent = [key for key in default if key not in line.question]
    overrides = {k: v for k, v in line.question.items() if k not in default or default[k] != v}
    order = list(line.question)
    if absent:
        extra["absent"] = absent
    if overrides:
        extra["question"] = overrides
    if order != [k for k in default if k in line.question] + [k for k in order if k not in default]:
        extra["order"] = order
    return extra


# --- rebuilding ------------------------------------------------------------------------


def line_for_annotation(annotation) -> dict:
    """The PRM800K line of one annotation.

    Query count: fetch annotations with
    ``select_related("solution__problem", "queue_item")`` and
    ``prefetch_related("solution__steps", "step_labels__completions")``; then this makes
    no queries.
    """
    solution = annotation.solution
    extra = annotation.question_extra or {}
    line: dict[str, Any] = {
        "labeler": annotation.labeler,
        "timestamp": extra.get("timestamp", format_timestamp(annotation.timestamp)),
        "generation": annotation.generation,
        "is_quality_control_question": annotation.is_quality_control,
        "is_initial_screening_question": annotation.is_initial_screening,
        "question": _question(annotation, extra),
        "label": {
            "steps": [_step(step_label, extra) for step_label in _ordered(annotation.step_labels.all())],
            "total_time": annotation.total_time_ms,
            "finish_reason": annotation.finish_reason,
        },
    }
    line.update(extra.get("line", {}))
    line["label"].update(extra.get("label", {}))
    return line


def _question(annotation, extra: dict) -> dict:
    solution = annotation.solution
    if annotation.queue_item_id is not None and annotation.queue_item is not None:
        score = annotation.queue_item.score_at_selection
    else:
        score = solution.pre_generated_verifier_score
    question = default_question(
        problem=solution.problem, solution=solution,
        step_texts=[step.text for step in _ordered(solution.steps.all())], verifier_score=score,
    )
    for key in extra.get("absent", []):
        question.pop(key, None)
    question.update(extra.get("question", {}))
    if "order" in extra:
        question = {key: question[key] for key in extra["order"] if key in question}
    return question


def _step(step_label, extra: dict) -> dict:
    step_extra = dict(extra.get("steps", {}).get(str(step_label.index), {}))
    absent = step_extra.pop(ABSENT, [])
    step = {
        "completions": [_completion(c) for c in _ordered(step_label.completions.all())],
        "human_completion": step_label.human_completion,
        "chosen_completion": step_label.chosen_completion,
    }
    for key in absent:
        step.pop(key, None)
    step.update(step_extra)
    return step


def _completion(completion) -> dict:
    extra = dict(completion.extra or {})
    absent = extra.pop(ABSENT, [])
    out = {"text": completion.text, "rating": completion.rating, "flagged": completion.flagged}
    for key in absent:
        out.pop(key, None)
    out.update(extra)
    return out


def _ordered(rows) -> list:
    # Prefetched rows keep the model's ordering; sorting again costs nothing and makes the
    # output independent of how the caller fetched them.
    return sorted(rows, key=lambda row: row.index)
