"""The PRM800K line format, both directions. This package owns the schema.

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
- ``total_time(annotation)``: a line's ``total_time`` and where it comes from (the page's
  active time, else claim to submit; an imported line's own).
- ``line_for_annotation(annotation)`` rebuilds the line from the database, with a top-level
  ``guideline_version`` (the project's guideline the label was made under) when it is known. A line imported
  and rebuilt is the same JSON object (``==``): what the pool rows cannot hold (keys a line
  lacked, values that differ from the shared Problem/Solution rows, unknown keys, the
  timestamp's exact spelling) is remembered in ``Annotation.question_extra``, unknown
  completion keys in ``Completion.extra``.

Modules: ``schema`` (keys, parsed types, value checks), ``parsing``, ``rebuilding``.
"""
from annotate.pool.prm800k.parsing import parse_line
from annotate.pool.prm800k.rebuilding import (
    ACTIVE,
    CLAIM_TO_SUBMIT,
    IMPORTED,
    TotalTime,
    default_question,
    line_for_annotation,
    question_extra_for,
    total_time,
)
from annotate.pool.prm800k.schema import (
    LineError,
    ParsedCompletion,
    ParsedLine,
    ParsedStep,
    format_timestamp,
    require_str,
    type_name,
)

__all__ = [
    "ACTIVE", "CLAIM_TO_SUBMIT", "IMPORTED", "LineError", "ParsedCompletion", "ParsedLine", "ParsedStep", "TotalTime",
    "default_question", "format_timestamp", "line_for_annotation", "parse_line", "question_extra_for", "require_str",
    "total_time", "type_name",
]
