"""Rebuilding a PRM800K line from the database, and what an import must keep to allow it.

``question_extra_for`` (at import) and ``line_for_annotation`` (at export) are two halves of
one round trip: what the Problem and Solution rows give is the default question, and only
what a line says otherwise is stored on its annotation.
"""
from __future__ import annotations

import datetime as dt
from typing import Any, NamedTuple

from annotate.labeling import verdicts
from annotate.pool.prm800k.schema import ABSENT, ParsedLine, format_timestamp

# Where a line's `total_time` comes from (an export's report counts its lines by these).
ACTIVE = "active"  # the active time the labeling page measured
CLAIM_TO_SUBMIT = "claim_to_submit"  # no time was reported (an API client): from the claim to the submit
IMPORTED = "imported"  # an imported line's own value, null where it gave none


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


def line_for_annotation(annotation) -> dict:
    """The PRM800K line of one annotation.

    Query count: fetch annotations with
    ``select_related("solution__problem", "queue_item")`` and
    ``prefetch_related("solution__steps", "step_labels__completions")``; then this makes
    no queries.
    """
    extra = annotation.question_extra or {}
    line: dict[str, Any] = {
        "labeler": annotation.labeler,
        "timestamp": extra.get("timestamp", format_timestamp(annotation.timestamp)),
        "generation": annotation.generation,
        "is_quality_control_question": annotation.is_quality_control,
        "is_initial_screening_question": annotation.is_initial_screening,
        "question": _question(annotation, extra),
        "label": {
            # The steps the annotation holds: none after the step a line ends on (verdicts.held).
            "steps": [_step(step_label, extra) for step_label in verdicts.held(annotation.step_labels.all())],
            "total_time": total_time(annotation).ms,
            "finish_reason": annotation.finish_reason,
        },
    }
    # The project's guideline version the annotation was labeled under, a top-level key beside
    # PRM800K's (its readers ignore it); absent when unknown (imported labels), so such a line is
    # written back byte for byte as it was read.
    if annotation.guideline_version is not None:
        line["guideline_version"] = annotation.guideline_version
    line.update(extra.get("line", {}))
    line["label"].update(extra.get("label", {}))
    return line


class TotalTime(NamedTuple):
    ms: int | None
    source: str


def total_time(annotation) -> TotalTime:
    """A line's `total_time` in whole milliseconds, and where it comes from.

    For a task labeled here, always an integer: the active time the page measured, else (no
    time was reported, as from an API client) the time from the claim to the submit. An
    imported line keeps its own value, null included: it is written back as it was read.
    Reads `total_time_ms`, `annotator_id`, `queue_item_id`, `created_at` and `timestamp`.
    """
    labeled_here = annotation.annotator_id is not None or annotation.queue_item_id is not None
    if not labeled_here:
        return TotalTime(annotation.total_time_ms, IMPORTED)
    if annotation.total_time_ms is not None:
        return TotalTime(annotation.total_time_ms, ACTIVE)
    # The annotation row is written at the claim (created_at) and stamped at the submit.
    end = annotation.timestamp or annotation.created_at
    return TotalTime(max(0, (end - annotation.created_at) // dt.timedelta(milliseconds=1)), CLAIM_TO_SUBMIT)


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
    # What the annotator was shown of the model (annotate.labeling.assistance), an extra key
    # beside PRM800K's, so a dataset can be filtered by it; absent when nothing was shown.
    if step_label.assistance is not None:
        step["assistance"] = step_label.assistance
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
