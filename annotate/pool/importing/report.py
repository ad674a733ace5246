"""What an import says about itself: one report entry per input line, and the summary.

The report is written to a temporary file next to its destination and moved into place at
the end, so a reader never sees half a report, and an atomic import that rolled back says
so on every line it had reported as written.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ImportSummary:
    path: str
    format: str
    total: int = 0
    lines: int = 0
    created: int = 0
    duplicates: int = 0
    errors: int = 0
    rolled_back: bool = False
    ungraded: int = 0  # lines imported ungraded: the import's grading budget was spent
    report_path: str | None = None
    first_errors: list[str] = field(default_factory=list)
    # The new solutions as graded on import (True / False / None).
    graded: dict[bool | None, int] = field(default_factory=lambda: {True: 0, False: 0, None: 0})
    # Every solution a line brought, new or already there: what the import hands to the queue.
    solution_ids: set[int] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return self.errors == 0 and not self.rolled_back

    def describe(self) -> str:
        text = (
            f"{self.path} ({self.format}): {self.lines} lines, {self.created} created, "
            f"{self.duplicates} duplicates, {self.errors} errors"
        )
        if self.rolled_back:
            text += "; nothing imported (atomic import with errors)"
        elif self.created:
            text += (f"; new solutions graded {self.graded[True]} right, {self.graded[False]} wrong, "
                     f"{self.graded[None]} unknown")
        if self.ungraded:
            text += f"; {self.ungraded} left ungraded (STEPWISE_IMPORT_GRADING_BUDGET ran out)"
        return text

    def forget_written(self) -> None:
        """After an atomic import rolled back: nothing it counted as written is there."""
        self.created = self.duplicates = 0
        self.graded = {True: 0, False: 0, None: 0}
        self.solution_ids = set()

    def count(self, outcome: Outcome) -> None:
        if outcome.solution is not None:
            self.solution_ids.add(outcome.solution)
        if outcome.status == "created":
            self.created += 1
            self.graded[outcome.is_correct] += 1
        elif outcome.status == "duplicate":
            self.duplicates += 1
        else:
            self.errors += 1
            if len(self.first_errors) < 20:
                self.first_errors.append(f"line {outcome.line_no}: {outcome.error}")


@dataclass
class Outcome:
    """What became of one input line: created, duplicate or error (with the field at fault)."""

    line_no: int
    status: str
    solution: int | None = None
    answer: str | None = None
    is_correct: bool | None = None
    n_steps: int = 0
    error: str | None = None
    note: str | None = None  # the solution's grading note: how is_correct was reached, or why it is unknown

    def as_report(self) -> dict:
        return {
            "line": self.line_no, "status": self.status, "solution": self.solution, "answer": self.answer,
            "is_correct": self.is_correct, "n_steps": self.n_steps, "error": self.error, "note": self.note,
        }


class Report:
    """One JSON line per input line, written to a temporary file and moved into place at the end."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self.handle = None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, self.temp = tempfile.mkstemp(dir=self.path.parent, prefix=".report-", suffix=".jsonl")
            self.handle = os.fdopen(fd, "w", encoding="utf-8")

    def write(self, outcome: Outcome) -> None:
        if self.handle:
            self.handle.write(json.dumps(outcome.as_report(), ensure_ascii=False) + "\n")

    def finish(self, summary: ImportSummary) -> None:
        if not self.handle or not self.path:
            return
        self.handle.close()
        self.handle = None
        if summary.rolled_back:
            self._mark_rolled_back(summary)
        os.replace(self.temp, self.path)
        summary.report_path = str(self.path)

    def _mark_rolled_back(self, summary: ImportSummary) -> None:
        """After an atomic import failed, lines reported as written were not: say so."""
        note = f"not imported: the import is atomic and {summary.errors} line(s) failed"
        assert self.path is not None  # finish() calls this only for a report with a path
        fd, rewritten = tempfile.mkstemp(dir=self.path.parent, prefix=".report-", suffix=".jsonl")
        with open(self.temp, encoding="utf-8") as old, os.fdopen(fd, "w", encoding="utf-8") as new:
            for raw in old:
                entry = json.loads(raw)
                if entry["status"] != "error":
                    entry.update(status="error", solution=None, error=note)
                new.write(json.dumps(entry, ensure_ascii=False) + "\n")
        os.replace(rewritten, self.temp)

    def close(self) -> None:
        if self.handle:
            self.handle.close()
        if self.path and os.path.exists(self.temp):
            os.unlink(self.temp)
