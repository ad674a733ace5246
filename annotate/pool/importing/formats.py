"""Parsing one decoded line of each input format into a Record, the pool's terms.

Formats (``auto`` picks one per file from its first valid line, see ``detect_format``):

- ``prm800k``: openai/prm800k lines with their labels (see ``annotate.pool.prm800k``);
- ``gsm8k``: ``{"question", "answer"}``, the answer's last line ``#### N``; the reference
  solution becomes the problem's ground truth and a known-correct solution;
- ``math``: ``{"problem"|"question", "solution"|"answer"}`` with ``\\boxed{}`` or
  ``The answer is: ...``; also stored as a reference solution;
- ``generic``: one solution per line, ``{"problem", "ground_truth_answer",
  "ground_truth_solution"?, "steps": [...] | "solution": "text", "answer"?, "source"?,
  "generator"?, "meta"?}``;
- ``math_shepherd``: peiyi9979/Math-Shepherd's ``{"input", "label", "task"}``: the problem, then
  ``Step 1: ...`` steps each closed by the tag ``ки``; ``label`` is the same text with ``+`` or
  ``-`` in each tag's place (automatic labels by rollouts: soft 1.0 / 0.0 per step);
- ``processbench``: Qwen/ProcessBench's ``{"id", "generator", "problem", "steps",
  "final_answer_correct", "label"}``, ``label`` the index of the first wrong step or -1 (expert
  labels, gold: steps before it good, the step at it bad, the steps after it unlabeled).

The last two bring labels of their own, stored as automatic labels (``AutoStepLabel`` in an
``AutoLabelRun`` of method ``imported``, never as human labels), see ``ImportedLabels``.

Solution text is split into steps by ``steps.splitting`` in the import's split mode; a
line that gives its ``steps`` as a list (any text format) keeps them as given, and split mode
``explicit`` requires that of every line.

Every error is a ``LineError`` naming the field, so the report can say what to fix.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, overload

from django.conf import settings

from annotate.models import Problem, Solution
from annotate.pool import prm800k
from annotate.pool.prm800k import LineError
from steps import splitting
from steps.answers import extract_answer
from steps.limits import SolutionLimits, TooBig
from steps.splitting import SplitMode

FORMATS = ("auto", "prm800k", "gsm8k", "math", "generic", "math_shepherd", "processbench")
MATH_SHEPHERD_TAG = "ки"
_FIRST_STEP = re.compile(r"\bstep 1\s*:", re.IGNORECASE)

Parser = Callable[[Any, int], "Record"]


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


def check_format(format: str) -> None:
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")


def detect_format(obj: dict) -> str | None:
    if isinstance(obj.get("input"), str) and MATH_SHEPHERD_TAG in obj["input"] and "label" in obj:
        return "math_shepherd"
    if "steps" in obj and "final_answer_correct" in obj and "label" in obj:
        return "processbench"
    if isinstance(obj.get("question"), dict) and "label" in obj:
        return "prm800k"
    if "ground_truth_answer" in obj and ("steps" in obj or "solution" in obj):
        return "generic"
    if "question" in obj and isinstance(obj.get("answer"), str) and "####" in obj["answer"]:
        return "gsm8k"
    if ("problem" in obj or "question" in obj) and ("solution" in obj or "answer" in obj):
        return "math"
    return None


def parser_for(format: str, *, source: str | None, split: str, split_mode: SplitMode) -> Parser:
    """The parse function of one file: its format, with the file's source and split applied."""

    def parse(obj: Any, line_no: int) -> Record:
        if not isinstance(obj, dict):
            raise LineError("line", f"must be a JSON object, got {prm800k.type_name(obj)}")
        if format == "auto":
            raise LineError("line", "format not recognised (no line of the file matches prm800k, gsm8k, math, "
                                    "generic, math_shepherd or processbench)")
        record = PARSERS[format](obj, line_no, split_mode=split_mode)
        record.source = source or record.source or format
        record.split = record.split or split
        check_size(record)
        return record

    return parse


def check_size(record: Record) -> None:
    """Refuse a solution of more steps, or a step (or PRM800K alternative) of more text, than
    Stepwise takes (`steps.limits`, the rule /api/score holds solutions to as well)."""
    others: list[tuple[str, str]] = []
    if record.labels is not None:
        others = [(f"label.steps[{i}].completions[{j}].text", c.text)
                  for i, step in enumerate(record.labels.steps) for j, c in enumerate(step.completions)]
    try:
        SolutionLimits.of(settings).check(record.steps, others=others)
    except TooBig as error:
        raise LineError(error.field, error.message) from None


@overload
def _text(obj: dict, key: str, *, required: Literal[True] = True, max_length: int | None = None) -> str: ...
@overload
def _text(obj: dict, key: str, *, required: bool, max_length: int | None = None) -> str | None: ...
def _text(obj: dict, key: str, *, required: bool = True, max_length: int | None = None) -> str | None:
    if key not in obj or obj[key] is None:
        if required:
            raise LineError(key, "is missing")
        return None
    return prm800k.require_str(obj[key], key, max_length=max_length, allow_empty=not required)


def _one_of(obj: dict, keys: tuple[str, str]) -> str:
    for key in keys:
        if key in obj:
            return key
    raise LineError(keys[0], f"is missing (expected '{keys[0]}' or '{keys[1]}')")


def _steps(obj: dict, text: str | None, split_mode: SplitMode) -> list[str]:
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


def parse_gsm8k(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    question = _text(obj, "question")
    answer = _text(obj, "answer")
    final = extract_answer(answer)
    if "####" not in answer or final is None:
        raise LineError("answer", "has no final line '#### N'")
    return Record(
        line_no=line_no, statement=question, ground_truth_answer=final, ground_truth_solution=answer,
        # GSM8K writes one step per line, with or without blank lines between them.
        steps=_steps(obj, answer, "line" if split_mode == "auto" else split_mode), final_answer=final,
        is_reference=True, generator="reference",
    )


def parse_math(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    statement = _text(obj, _one_of(obj, ("problem", "question")))
    solution_key = _one_of(obj, ("solution", "answer"))
    solution = _text(obj, solution_key)
    final = extract_answer(solution)
    # MATH as distributed has both: the worked solution and the short answer.
    truth = _text(obj, "answer") if solution_key == "solution" and "answer" in obj else final
    if truth is None:
        raise LineError(solution_key, "has no final answer (no \\boxed{...} and no 'The answer is: ...')")
    meta = {k: v for k, v in obj.items() if k not in ("problem", "question", "solution", "answer", "steps")}
    return Record(
        line_no=line_no, statement=statement, ground_truth_answer=truth, ground_truth_solution=solution,
        steps=_steps(obj, solution, split_mode), final_answer=final, is_reference=True, generator="reference",
        meta=meta,
    )


def parse_generic(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    statement = _text(obj, "problem")
    truth = _text(obj, "ground_truth_answer")
    if "steps" not in obj and "solution" not in obj:
        raise LineError("steps", "is missing (expected 'steps' or 'solution')")
    steps = _steps(obj, None if "steps" in obj else _text(obj, "solution"), split_mode)
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise LineError("meta", f"must be an object, got {prm800k.type_name(meta)}")
    answer = _text(obj, "answer", required=False)
    return Record(
        line_no=line_no, statement=statement, ground_truth_answer=truth,
        ground_truth_solution=_text(obj, "ground_truth_solution", required=False),
        steps=steps, final_answer=answer or extract_answer("\n\n".join(steps)),
        source=_text(obj, "source", required=False, max_length=100) or "",
        generator=_text(obj, "generator", required=False, max_length=100) or "",
        meta=meta,
    )


def parse_prm800k(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    line = prm800k.parse_line(obj, line_no)
    return Record(
        line_no=line_no, statement=line.problem, ground_truth_answer=line.ground_truth_answer,
        ground_truth_solution=line.ground_truth_solution, steps=line.solution_steps(),
        final_answer=line.final_answer(), generator="prm800k",
        pre_generated_answer=line.pre_generated_answer,
        pre_generated_verifier_score=line.pre_generated_verifier_score, labels=line,
    )


def parse_math_shepherd(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    """A Math-Shepherd line: the text before ``Step 1:`` is the problem, each tag closes a step.

    The label text must be the input with ``+`` or ``-`` at each tag, so a label read from a
    shifted or edited line is refused rather than put on the wrong step. The last step's label
    is the final answer's grade: Math-Shepherd labels a complete solution by its answer.
    """
    text, label = _text(obj, "input"), _text(obj, "label")
    pieces = text.split(MATH_SHEPHERD_TAG)
    if len(pieces) < 2 or pieces[-1].strip():
        raise LineError("input", f"must end each step with the tag '{MATH_SHEPHERD_TAG}' (text follows the last tag)")
    signs: list[str] = []
    position = 0
    for piece in pieces[:-1]:
        position += len(piece)
        sign = label[position:position + 1]
        if sign not in ("+", "-") or label[position - len(piece):position] != piece:
            raise LineError("label", f"does not match 'input' at step tag {len(signs) + 1}: expected the "
                                     f"input's text with '+' or '-' at each '{MATH_SHEPHERD_TAG}'")
        signs.append(sign)
        position += 1
    if label[position:] != pieces[-1]:
        raise LineError("label", "does not match 'input' after the last step tag")
    first = _FIRST_STEP.search(pieces[0])
    if first is None:
        raise LineError("input", "has no 'Step 1:' where the problem ends and the steps begin")
    statement = pieces[0][:first.start()].strip()
    steps = [pieces[0][first.start():].strip(), *(piece.strip() for piece in pieces[1:-1])]
    if not statement or not all(steps):
        raise LineError("input", "has an empty problem or an empty step between tags")
    task = obj.get("task")
    return Record(
        line_no=line_no, statement=statement, ground_truth_answer=None, ground_truth_solution=None,
        steps=steps, final_answer=extract_answer(steps[-1]), generator="math-shepherd",
        meta={"task": task} if isinstance(task, str) else {}, given_is_correct=signs[-1] == "+",
        imported_labels=ImportedLabels("math-shepherd", "automatic", tuple(1.0 if s == "+" else 0.0 for s in signs)),
    )


def parse_processbench(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    """A ProcessBench line: its steps as given, gold labels up to and at the first error."""
    statement = _text(obj, "problem")
    steps = _steps({"steps": obj.get("steps")}, None, "explicit")
    first_error = obj.get("label")
    if type(first_error) is not int or not -1 <= first_error < len(steps):
        raise LineError("label", f"must be -1 or a step index below {len(steps)}, got {first_error!r}")
    correct = obj.get("final_answer_correct")
    if type(correct) is not bool:
        raise LineError("final_answer_correct", f"must be a boolean, got {prm800k.type_name(correct)}")
    bad = len(steps) if first_error == -1 else first_error
    soft = tuple(1.0 if i < bad else 0.0 if i == bad else None for i in range(len(steps)))
    return Record(
        line_no=line_no, statement=statement, ground_truth_answer=None, ground_truth_solution=None,
        steps=steps, final_answer=extract_answer(steps[-1]),
        generator=_text(obj, "generator", required=False, max_length=100) or "",
        meta={"id": obj["id"]} if isinstance(obj.get("id"), str) else {}, given_is_correct=correct,
        imported_labels=ImportedLabels("processbench", "gold", soft),
    )


PARSERS = {"gsm8k": parse_gsm8k, "math": parse_math, "generic": parse_generic, "prm800k": parse_prm800k,
           "math_shepherd": parse_math_shepherd, "processbench": parse_processbench}
