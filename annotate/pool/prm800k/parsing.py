"""Parsing and validating one decoded PRM800K line into a ``ParsedLine``.

Nothing a line holds is dropped: keys the schema does not know, completion keys a line
lacks and a timestamp spelled differently from ours go into ``extra``, so the line can be
rebuilt exactly (see ``rebuilding``).
"""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from annotate.pool.prm800k.schema import (
    ABSENT,
    COMPLETION_KEYS,
    FINISH_REASONS,
    LABEL_KEYS,
    LINE_KEYS,
    STEP_KEYS,
    LineError,
    ParsedCompletion,
    ParsedLine,
    ParsedStep,
    format_timestamp,
    human_text,
    optional_int,
    require_bool,
    require_list,
    require_object,
    require_str,
    type_name,
    unknown_keys,
)
from steps import ratings


def parse_line(obj: Any, line_no: int) -> ParsedLine:
    """Validate one decoded PRM800K line. Raises ``LineError`` naming the bad field."""
    obj = require_object(obj, "line")
    for key in LINE_KEYS:
        if key not in obj:
            raise LineError(key, "is missing")
    question = _parse_question(require_object(obj["question"], "question"))
    label = require_object(obj["label"], "label")
    for key in LABEL_KEYS:
        if key not in label:
            raise LineError(f"label.{key}", "is missing")
    steps = require_list(label["steps"], "label.steps")
    timestamp, extra = _parse_timestamp(obj["timestamp"])
    for name, unknown in (("line", unknown_keys(obj, LINE_KEYS)), ("label", unknown_keys(label, LABEL_KEYS))):
        if unknown:
            extra[name] = unknown
    parsed_steps = [_parse_step(step, f"label.steps[{i}]") for i, step in enumerate(steps)]
    step_extra = {str(i): s.extra for i, s in enumerate(parsed_steps) if s.extra}
    if step_extra:
        extra["steps"] = step_extra
    line = ParsedLine(
        line_no=line_no,
        labeler=require_str(obj["labeler"], "labeler", max_length=100, allow_empty=False),
        timestamp=timestamp,
        generation=optional_int(obj["generation"], "generation", minimum=-(2**31), maximum=2**31 - 1),
        is_quality_control=require_bool(obj["is_quality_control_question"], "is_quality_control_question"),
        is_initial_screening=require_bool(obj["is_initial_screening_question"], "is_initial_screening_question"),
        question=question,
        steps=parsed_steps,
        total_time_ms=optional_int(label["total_time"], "label.total_time", minimum=0, maximum=2**63 - 1),
        finish_reason=_parse_finish_reason(label["finish_reason"]),
        extra=extra,
    )
    if not line.solution_steps():
        raise LineError("label.steps", "is empty and the question has no pre_generated_steps")
    return line


def _parse_question(question: dict) -> dict:
    if "problem" not in question:
        raise LineError("question.problem", "is missing")
    require_str(question["problem"], "question.problem", allow_empty=False)
    for key in ("ground_truth_solution", "ground_truth_answer", "pre_generated_answer"):
        if question.get(key) is not None:
            require_str(question[key], f"question.{key}")
    steps = question.get("pre_generated_steps")
    if steps is not None:
        for i, step in enumerate(require_list(steps, "question.pre_generated_steps")):
            require_str(step, f"question.pre_generated_steps[{i}]")
    score = question.get("pre_generated_verifier_score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
        raise LineError("question.pre_generated_verifier_score", f"must be a number or null, got {type_name(score)}")
    return question


def _parse_step(step: Any, where: str) -> ParsedStep:
    step = require_object(step, where)
    if "completions" not in step:
        raise LineError(f"{where}.completions", "is missing")
    completions = [
        _parse_completion(c, f"{where}.completions[{j}]")
        for j, c in enumerate(require_list(step["completions"], f"{where}.completions"))
    ]
    chosen = optional_int(step.get("chosen_completion"), f"{where}.chosen_completion", minimum=0, maximum=2**31 - 1)
    if chosen is not None and chosen >= len(completions):
        raise LineError(f"{where}.chosen_completion", f"is {chosen} but the step has {len(completions)} completions")
    human = step.get("human_completion")
    if human is not None and human_text(human) is None:
        raise LineError(f"{where}.human_completion", "must be null, a string or an object with a 'text' string")
    if not completions and human is None:
        raise LineError(f"{where}.completions", "is empty and there is no human_completion")
    extra = unknown_keys(step, STEP_KEYS)
    absent = [key for key in STEP_KEYS[1:] if key not in step]
    if absent:
        extra[ABSENT] = absent
    return ParsedStep(completions=completions, human_completion=human, chosen_completion=chosen, extra=extra)


def _parse_completion(completion: Any, where: str) -> ParsedCompletion:
    completion = require_object(completion, where)
    if "text" not in completion:
        raise LineError(f"{where}.text", "is missing")
    rating = completion.get("rating")
    if rating is not None and not ratings.is_rating(rating):
        raise LineError(f"{where}.rating", f"must be {ratings.ALLOWED} or null, got {rating!r}")
    flagged = completion.get("flagged")
    if flagged is not None and not isinstance(flagged, bool):
        raise LineError(f"{where}.flagged", f"must be true, false or null, got {type_name(flagged)}")
    extra = unknown_keys(completion, COMPLETION_KEYS)
    absent = [key for key in ("rating", "flagged") if key not in completion]
    if absent:
        extra[ABSENT] = absent
    text = require_str(completion["text"], f"{where}.text")
    return ParsedCompletion(text=text, rating=rating, flagged=flagged, extra=extra)


def _parse_timestamp(value: Any) -> tuple[datetime | None, dict]:
    if value is None:
        return None, {}
    text = require_str(value, "timestamp")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise LineError("timestamp", f"is not an ISO 8601 date-time: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # PRM800K writes naive UTC times
    # Kept verbatim when our own spelling of the moment would differ, for exact round trips.
    return moment, ({} if format_timestamp(moment) == text else {"timestamp": text})


def _parse_finish_reason(value: Any) -> str | None:
    if value is not None and value not in FINISH_REASONS:
        raise LineError("label.finish_reason", f"must be one of {', '.join(FINISH_REASONS)} or null, got {value!r}")
    return value
