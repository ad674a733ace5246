"""Importing JSONL files into the pool: problems, solutions, steps, and PRM800K labels.

``import_pool(path=...)`` streams the file line by line (constant memory), parses each line
in its format, extracts and grades the final answer, and writes batches of ~1000 lines with
bulk inserts, each batch in one transaction. Re-importing finds everything by content hash
and creates nothing. Every input line gets one report entry; a bad line is reported with
the field at fault and the other lines import, unless ``atomic=True``, when one bad line
means nothing is written.

Formats (``auto`` picks one per file from its first valid line):

- ``prm800k``: openai/prm800k lines with their labels (see ``annotate.prm800k``);
- ``gsm8k``: ``{"question", "answer"}``, the answer's last line ``#### N``; the reference
  solution becomes the problem's ground truth and a known-correct solution;
- ``math``: ``{"problem"|"question", "solution"|"answer"}`` with ``\\boxed{}`` or
  ``The answer is: ...``; also stored as a reference solution;
- ``generic``: one solution per line, ``{"problem", "ground_truth_answer",
  "ground_truth_solution"?, "steps": [...] | "solution": "text", "answer"?, "source"?,
  "generator"?, "meta"?}``.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from . import prm800k
from .answers import SplitMode, extract_answer, split_steps
from .grading import grade
from .models import Annotation, Completion, ImportJob, JobState, Problem, Solution, Step, StepLabel
from .prm800k import LineError

FORMATS = ("auto", "prm800k", "gsm8k", "math", "generic")
BATCH_SIZE = 1000
SPLIT_NAMES = {"train", "test", "val", "valid", "validation", "dev"}

Progress = Callable[[int, int, "ImportSummary"], None]


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
    report_path: str | None = None
    first_errors: list[str] = field(default_factory=list)

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
        return text


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

    @cached_property
    def problem_hash(self) -> str:
        return Problem.hash_for(self.statement, self.ground_truth_answer)

    @cached_property
    def solution_hash(self) -> str:
        return Solution.hash_for(self.problem_hash, self.steps)


@dataclass
class Outcome:
    line_no: int
    status: str
    solution: int | None = None
    answer: str | None = None
    is_correct: bool | None = None
    n_steps: int = 0
    error: str | None = None

    def as_report(self) -> dict:
        return {
            "line": self.line_no, "status": self.status, "solution": self.solution, "answer": self.answer,
            "is_correct": self.is_correct, "n_steps": self.n_steps, "error": self.error,
        }


class _Rollback(Exception):
    pass


def import_pool(
    *,
    path: str | Path,
    format: str = "auto",
    source: str | None = None,
    atomic: bool = False,
    report_path: str | Path | None = None,
    progress: Progress | None = None,
    split_mode: SplitMode = "auto",
    batch_size: int = BATCH_SIZE,
) -> ImportSummary:
    """Import one JSONL file into the pool; see the module docstring."""
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    if source is not None and len(source) > 100:
        raise ValueError("source is longer than 100 characters")
    path = Path(path)
    if format == "auto":
        format = detect_file_format(path) or "auto"
    summary = ImportSummary(path=str(path), format=format, total=count_lines(path))
    split = path.stem.lower() if path.stem.lower() in SPLIT_NAMES else ""
    parse = _parser(format, source=source, split=split, split_mode=split_mode)
    report = _Report(report_path)
    try:
        if atomic:
            try:
                with transaction.atomic():
                    _import_lines(path, parse, summary, report, progress, batch_size)
                    if summary.errors:
                        raise _Rollback
            except _Rollback:
                summary.rolled_back = True
                summary.created = summary.duplicates = 0
        else:
            _import_lines(path, parse, summary, report, progress, batch_size)
        report.finish(summary)
    finally:
        report.close()
    return summary


def _import_lines(path, parse, summary, report, progress, batch_size) -> None:
    # Lines in input order, parsed (Record) or already failed (Outcome), so that the
    # report keeps the file's order although only the records go to the database.
    pending: list[Record | Outcome] = []
    for line_no, obj in read_jsonl(path):
        summary.lines += 1
        try:
            if isinstance(obj, _BadJson):
                raise LineError("line", obj.message)
            pending.append(parse(obj, line_no))
        except (LineError, ValueError) as error:
            pending.append(Outcome(line_no=line_no, status="error", error=str(error)))
        if len(pending) >= batch_size:
            _flush(pending, summary, report, progress)
            pending = []
    _flush(pending, summary, report, progress)


def _flush(pending: list, summary: ImportSummary, report: "_Report", progress: Progress | None) -> None:
    records = [item for item in pending if isinstance(item, Record)]
    written = iter(write_batch(records) if records else [])
    for item in pending:
        _count(summary, report, next(written) if isinstance(item, Record) else item)
    if progress is not None:
        progress(summary.lines, summary.total, summary)


def _count(summary: ImportSummary, report: "_Report", outcome: Outcome) -> None:
    if outcome.status == "created":
        summary.created += 1
    elif outcome.status == "duplicate":
        summary.duplicates += 1
    else:
        summary.errors += 1
        if len(summary.first_errors) < 20:
            summary.first_errors.append(f"line {outcome.line_no}: {outcome.error}")
    report.write(outcome)


# --- reading ---------------------------------------------------------------------------


@dataclass
class _BadJson:
    message: str


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, decoded object or _BadJson) for every non-blank line, streaming."""
    with open(path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                yield line_no, json.loads(raw)
            except UnicodeDecodeError as error:
                yield line_no, _BadJson(f"is not UTF-8 text ({error.reason} at byte {error.start})")
            except json.JSONDecodeError as error:
                yield line_no, _BadJson(f"is not valid JSON: {error.msg} at column {error.colno}")


def count_lines(path: Path) -> int:
    """Non-blank lines, counted in binary chunks (fast, constant memory)."""
    count = 0
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                count += 1
    return count


def detect_file_format(path: Path) -> str | None:
    """The format of the first line that is a JSON object, or None when none is recognisable."""
    for _, obj in read_jsonl(path):
        if isinstance(obj, dict):
            found = detect_format(obj)
            if found:
                return found
    return None


def detect_format(obj: dict) -> str | None:
    if isinstance(obj.get("question"), dict) and "label" in obj:
        return "prm800k"
    if "ground_truth_answer" in obj and ("steps" in obj or "solution" in obj):
        return "generic"
    if "question" in obj and isinstance(obj.get("answer"), str) and "####" in obj["answer"]:
        return "gsm8k"
    if ("problem" in obj or "question" in obj) and ("solution" in obj or "answer" in obj):
        return "math"
    return None


# --- parsing per format ------------------------------------------------------------------


def _parser(format: str, *, source: str | None, split: str, split_mode: SplitMode) -> Callable[[Any, int], Record]:
    def parse(obj: Any, line_no: int) -> Record:
        if not isinstance(obj, dict):
            raise LineError("line", f"must be a JSON object, got {prm800k._type(obj)}")
        if format == "auto":
            raise LineError("line", "format not recognised (no line of the file matches prm800k, gsm8k, math "
                                    "or generic)")
        record = PARSERS[format](obj, line_no, split_mode=split_mode)
        record.source = source or record.source or format
        record.split = record.split or split
        return record

    return parse


def _text(obj: dict, key: str, *, required: bool = True, max_length: int | None = None) -> str | None:
    if key not in obj or obj[key] is None:
        if required:
            raise LineError(key, "is missing")
        return None
    value = obj[key]
    if not isinstance(value, str):
        raise LineError(key, f"must be a string, got {prm800k._type(value)}")
    if required and not value.strip():
        raise LineError(key, "is empty")
    if max_length is not None and len(value) > max_length:
        raise LineError(key, f"is longer than {max_length} characters")
    return value


def _one_of(obj: dict, keys: tuple[str, str]) -> str:
    for key in keys:
        if key in obj:
            return key
    raise LineError(keys[0], f"is missing (expected '{keys[0]}' or '{keys[1]}')")


def parse_gsm8k(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    question = _text(obj, "question")
    answer = _text(obj, "answer")
    final = extract_answer(answer)
    if "####" not in answer or final is None:
        raise LineError("answer", "has no final line '#### N'")
    return Record(
        line_no=line_no, statement=question, ground_truth_answer=final, ground_truth_solution=answer,
        steps=split_steps(answer, "lines" if split_mode == "auto" else split_mode), final_answer=final,
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
    meta = {k: v for k, v in obj.items() if k not in ("problem", "question", "solution", "answer")}
    return Record(
        line_no=line_no, statement=statement, ground_truth_answer=truth, ground_truth_solution=solution,
        steps=split_steps(solution, split_mode), final_answer=final, is_reference=True, generator="reference",
        meta=meta,
    )


def parse_generic(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    statement = _text(obj, "problem")
    truth = _text(obj, "ground_truth_answer")
    if "steps" in obj:
        steps = obj["steps"]
        if not isinstance(steps, list) or not steps:
            raise LineError("steps", f"must be a non-empty list of strings, got {prm800k._type(steps)}")
        for i, step in enumerate(steps):
            if not isinstance(step, str) or not step.strip():
                raise LineError(f"steps[{i}]", f"must be a non-empty string, got {prm800k._type(step)}")
    elif "solution" in obj:
        steps = split_steps(_text(obj, "solution"), split_mode)
    else:
        raise LineError("steps", "is missing (expected 'steps' or 'solution')")
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise LineError("meta", f"must be an object, got {prm800k._type(meta)}")
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


PARSERS = {"gsm8k": parse_gsm8k, "math": parse_math, "generic": parse_generic, "prm800k": parse_prm800k}


# --- writing -------------------------------------------------------------------------------


def write_batch(records: list[Record]) -> list[Outcome]:
    """Grade and write one batch in one transaction; one outcome per record, in order."""
    for record in records:
        record.is_correct = grade(answer=record.final_answer, truth=record.ground_truth_answer)
    return _write_atomically(records)


def grading_note(record: Record) -> str:
    """Why a solution's grade is unknown, for the admin; empty when it is known."""
    if record.is_correct is not None:
        return ""
    if not record.final_answer:
        return "no final answer found in the solution"
    if not record.ground_truth_answer:
        return "the problem has no ground-truth answer"
    return "math-verify could not decide (unreadable or too slow)"


def _write_atomically(records: list[Record]) -> list[Outcome]:
    try:
        with transaction.atomic():
            return _write(records)
    except IntegrityError:
        # Usually another import wrote the same content between our look-up and insert:
        # looking up again finds it as a duplicate. Otherwise one line is at fault.
        pass
    except DatabaseError as error:
        if len(records) == 1:
            return [Outcome(line_no=records[0].line_no, status="error", error=f"rejected by the database: {error}")]
    if len(records) == 1:
        try:
            with transaction.atomic():
                return _write(records)
        except DatabaseError as error:
            return [Outcome(line_no=records[0].line_no, status="error", error=f"rejected by the database: {error}")]
    # Line by line, so that only the line the database rejects is reported and skipped.
    return [outcome for record in records for outcome in _write_atomically([record])]


def _write(records: list[Record]) -> list[Outcome]:
    problems = _problems_for(records)
    solutions, created = _solutions_for(records, problems)
    annotated = _annotations_for(records, problems, solutions)
    outcomes = []
    for record in records:
        solution = solutions[_solution_hash(record)]
        is_new = id(record) in created if record.labels is None else id(record) in annotated
        outcomes.append(Outcome(
            line_no=record.line_no, status="created" if is_new else "duplicate", solution=solution.pk,
            answer=solution.final_answer, is_correct=solution.is_correct, n_steps=len(record.steps),
        ))
    return outcomes


def _problem_hash(record: Record) -> str:
    return record.problem_hash


def _solution_hash(record: Record) -> str:
    return record.solution_hash


def _problems_for(records: list[Record]) -> dict[str, Problem]:
    hashes = {_problem_hash(r): r for r in records}
    found = {p.content_hash: p for p in Problem.objects.filter(content_hash__in=list(hashes))}
    new = [
        Problem(
            statement=r.statement, ground_truth_answer=r.ground_truth_answer,
            ground_truth_solution=r.ground_truth_solution, source=r.source, split=r.split, content_hash=h,
        )
        for h, r in hashes.items() if h not in found
    ]
    Problem.objects.bulk_create(new)
    found.update({p.content_hash: p for p in new})
    return found


def _solutions_for(records: list[Record], problems: dict[str, Problem]) -> tuple[dict[str, Solution], set[int]]:
    """Solutions by content hash, and the ids of the records whose solution is new."""
    hashes = {}
    for record in records:
        hashes.setdefault(_solution_hash(record), record)
    found = {s.content_hash: s for s in Solution.objects.filter(content_hash__in=list(hashes))}
    new_records = [(h, r) for h, r in hashes.items() if h not in found]
    new = [
        Solution(
            problem=problems[_problem_hash(r)], final_answer=r.final_answer, is_correct=r.is_correct,
            grading_note=grading_note(r),
            source=r.source, generator=r.generator, is_reference=r.is_reference, meta=r.meta,
            pre_generated_answer=r.pre_generated_answer,
            pre_generated_verifier_score=r.pre_generated_verifier_score, content_hash=h,
        )
        for h, r in new_records
    ]
    _insert_solutions(new)
    insert_rows(Step, ("solution_id", "index", "text", "gold_rating"), (
        (solution.pk, i, text, None)
        for solution, (_, record) in zip(new, new_records)
        for i, text in enumerate(record.steps)
    ))
    found.update({s.content_hash: s for s in new})
    return found, {id(r) for _, r in new_records}


SOLUTION_COLUMNS = (
    "problem_id", "final_answer", "is_correct", "grading_note", "source", "generator", "is_reference",
    "pre_generated_answer", "pre_generated_verifier_score", "is_gold", "meta", "content_hash", "created_at",
)


def _insert_solutions(solutions: list[Solution]) -> None:
    """Insert new solutions and set their ids.

    bulk_create's per-field preparation was a third of the import's time; a plain insert
    (COPY on PostgreSQL) and one look-up of the ids by content hash cost far less.
    """
    meta = Solution._meta.get_field("meta")
    now = timezone.now()
    rows = []
    for solution in solutions:
        solution.created_at = now
        values = [getattr(solution, column) for column in SOLUTION_COLUMNS]
        values[SOLUTION_COLUMNS.index("meta")] = meta.get_db_prep_save(solution.meta, connection)
        values[SOLUTION_COLUMNS.index("created_at")] = connection.ops.adapt_datetimefield_value(now)
        rows.append(values)
    insert_rows(Solution, SOLUTION_COLUMNS, rows)
    hashes = [solution.content_hash for solution in solutions]
    ids = dict(Solution.objects.filter(content_hash__in=hashes).values_list("content_hash", "id"))
    for solution in solutions:
        solution.pk = ids[solution.content_hash]
        solution._state.adding = False
        solution._state.db = connection.alias


def insert_rows(model, columns: tuple[str, ...], rows: Iterable[Sequence]) -> None:
    """Plain INSERT of many rows, values already in database form, bypassing the ORM.

    Steps outnumber solutions ten to one; building and preparing a model instance per
    step cost more than the database write itself.
    """
    table = connection.ops.quote_name(model._meta.db_table)
    names = ", ".join(connection.ops.quote_name(model._meta.get_field(c).column) for c in columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # COPY streams the rows in one statement: several times faster than INSERTs.
            with cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            sql = f"INSERT INTO {table} ({names}) VALUES ({', '.join(['%s'] * len(columns))})"
            cursor.executemany(sql, list(rows))


def _annotations_for(records: list[Record], problems: dict[str, Problem], solutions: dict[str, Solution]) -> set[int]:
    """Write the PRM800K labels of the records; the ids of the records annotated anew."""
    labeled = [r for r in records if r.labels is not None]
    if not labeled:
        return set()
    keys = {(solutions[_solution_hash(r)].pk, r.labels.labeler) for r in labeled}
    existing = set(
        Annotation.objects.filter(
            solution_id__in={k[0] for k in keys}, labeler__in={k[1] for k in keys}
        ).values_list("solution_id", "labeler")
    )
    new: list[tuple[Record, Annotation]] = []
    for record in labeled:
        solution = solutions[_solution_hash(record)]
        key = (solution.pk, record.labels.labeler)
        if key in existing:
            continue
        existing.add(key)  # a repeated line within the batch is a duplicate too
        new.append((record, _annotation(record, problems[_problem_hash(record)], solution)))
    Annotation.objects.bulk_create([a for _, a in new])
    _write_step_labels(new)
    return {id(r) for r, _ in new}


def _annotation(record: Record, problem: Problem, solution: Solution) -> Annotation:
    line = record.labels
    assert line is not None
    return Annotation(
        solution=solution, labeler=line.labeler, status=Annotation.Status.SUBMITTED,
        finish_reason=line.finish_reason, total_time_ms=line.total_time_ms, generation=line.generation,
        is_quality_control=line.is_quality_control, is_initial_screening=line.is_initial_screening,
        timestamp=line.timestamp,
        # Compared with the rows as stored (the problem may predate this line).
        question_extra=prm800k.question_extra_for(line, problem=problem, solution=solution, step_texts=record.steps),
    )


def _write_step_labels(new: list[tuple[Record, Annotation]]) -> None:
    step_labels: list[tuple[StepLabel, prm800k.ParsedStep]] = [
        (StepLabel(annotation=annotation, index=i, chosen_completion=step.chosen_completion,
                   human_completion=step.human_completion), step)
        for record, annotation in new
        for i, step in enumerate(record.labels.steps)
    ]
    StepLabel.objects.bulk_create([s for s, _ in step_labels])
    Completion.objects.bulk_create(
        Completion(step_label=step_label, index=j, text=c.text, rating=c.rating, flagged=c.flagged, extra=c.extra)
        for step_label, step in step_labels
        for j, c in enumerate(step.completions)
    )


# --- background jobs (the admin upload page) ----------------------------------------------


def save_upload(*, chunks: Iterable[bytes], original_name: str) -> Path:
    """Store an uploaded file under UPLOADS_DIR/imports with a name nobody else has."""
    folder = Path(settings.UPLOADS_DIR) / "imports"
    folder.mkdir(parents=True, exist_ok=True)
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(original_name).stem)[:60] or "upload"
    fd, name = tempfile.mkstemp(dir=folder, prefix=f"{stem}-", suffix=".jsonl")
    with os.fdopen(fd, "wb") as handle:
        for chunk in chunks:
            handle.write(chunk)
    return Path(name)


def create_import_job(
    *, path: Path, original_name: str = "", format: str = "auto", source: str = "", atomic: bool = False, user=None
) -> ImportJob:
    """An ImportJob row for a saved file, queued for a worker once the transaction commits."""
    from annotate.tasks import import_pool_task

    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    job = ImportJob.objects.create(
        path=str(path), original_name=original_name[:300], format=format, source=source, atomic=atomic,
        report_path=str(path.with_name(path.stem + "-report.jsonl")), created_by=user,
    )
    import_pool_task.delay_on_commit(job.pk)
    return job


def run_import_job(*, job_id: int) -> ImportJob:
    """Run one ImportJob with its progress in the row.

    Idempotent: a finished job is left alone, and a redelivered one imports the file again,
    which finds what the first attempt wrote and creates nothing twice.
    """
    job = ImportJob.objects.get(pk=job_id)
    if job.is_finished:
        return job
    rows = ImportJob.objects.filter(pk=job.pk)
    rows.update(state=JobState.RUNNING, done=0, error="")

    def progress(done: int, total: int, summary: ImportSummary) -> None:
        # Atomic imports run in one transaction: these updates show only at its end.
        rows.update(done=done, total=total, created=summary.created, duplicates=summary.duplicates,
                    errors=summary.errors)

    try:
        summary = import_pool(path=job.path, format=job.format, source=job.source or None, atomic=job.atomic,
                              report_path=job.report_path, progress=progress)
    except Exception as error:
        rows.update(state=JobState.FAILED, error=f"{type(error).__name__}: {error}", finished_at=timezone.now())
        raise
    rows.update(
        state=JobState.FAILED if summary.rolled_back else JobState.SUCCEEDED,
        error=summary.describe() if summary.rolled_back else "",
        format=summary.format, total=summary.lines, done=summary.lines, created=summary.created,
        duplicates=summary.duplicates, errors=summary.errors, finished_at=timezone.now(),
    )
    job.refresh_from_db()
    return job


# --- the report --------------------------------------------------------------------------


class _Report:
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
