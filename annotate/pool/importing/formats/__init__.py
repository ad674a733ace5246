"""The import formats, one module each, in one registry: what the upload page, the command, the
API and ``auto`` detection read of a format, and the parse function of one file.

Each module builds one `ImportFormat` (name, help, line parser, detection) and says in its
docstring what a line of its format is and what it becomes; adding a format is writing its
module and naming it in `FORMATS` below. ``auto`` picks one format per file from its first
valid line (``detect_format``).

Solution text is split into steps by ``steps.splitting`` in the import's split mode; a
line that gives its ``steps`` as a list (any text format) keeps them as given, and split mode
``explicit`` requires that of every line.

Every error is a ``LineError`` naming the field, so the report can say what to fix.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from annotate.pool.importing.formats import generic, gsm8k, math, math_shepherd, prm800k, processbench
from annotate.pool.importing.formats.base import ImportedLabels, ImportFormat, Record
from annotate.pool.prm800k import LineError, type_name
from steps.limits import SolutionLimits, TooBig
from steps.splitting import SplitMode

FORMATS: dict[str, ImportFormat] = {f.name: f for f in (
    prm800k.FORMAT, gsm8k.FORMAT, math.FORMAT, generic.FORMAT, math_shepherd.FORMAT, processbench.FORMAT,
)}
AUTO = "auto"
AUTO_HELP = "detected from the first line"
_BY_RANK = sorted(FORMATS.values(), key=lambda f: f.detect_rank)

Parser = Callable[[Any, int], Record]

__all__ = ["AUTO", "FORMATS", "ImportFormat", "ImportedLabels", "Parser", "Record", "check_format", "check_size",
           "choices", "detect_format", "names", "parser_for"]


def names() -> tuple[str, ...]:
    """What a caller may name: ``auto``, then every registered format."""
    return (AUTO, *FORMATS)


def choices() -> list[tuple[str, str]]:
    """(name, "name: help") of ``auto`` and every format, for a form's choices."""
    return [(AUTO, f"{AUTO}: {AUTO_HELP}"), *((f.name, f.choice) for f in FORMATS.values())]


def check_format(format: str) -> None:
    if format not in names():
        raise ValueError(f"unknown format {format!r}; expected one of {', '.join(names())}")


def detect_format(obj: dict) -> str | None:
    """The format a file's object looks like, trying the most specific first (``detect_rank``)."""
    return next((f.name for f in _BY_RANK if f.detect(obj)), None)


def parser_for(format: str, *, source: str | None, split: str, split_mode: SplitMode) -> Parser:
    """The parse function of one file: its format, with the file's source and split applied."""

    def parse(obj: Any, line_no: int) -> Record:
        if not isinstance(obj, dict):
            raise LineError("line", f"must be a JSON object, got {type_name(obj)}")
        if format == AUTO:
            raise LineError("line", f"format not recognised (no line of the file matches {_listed(FORMATS)})")
        record = FORMATS[format].parse(obj, line_no, split_mode=split_mode)
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


def _listed(names) -> str:
    *rest, last = names
    return f"{', '.join(rest)} or {last}"
