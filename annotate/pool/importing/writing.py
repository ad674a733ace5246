"""Writing parsed records into one project: problems, solutions, steps, PRM800K labels and a
dataset's automatic labels, found by content hash within the project.

A batch is graded (within the import's ``GradingBudget``), then written in one transaction
with bulk inserts (COPY on PostgreSQL).
Everything is looked up by content hash first, in the project only (the same text may sit in
two projects, once in each), so a re-import, or a redelivered job, finds what is there and
creates nothing twice; every row made carries the project explicitly. When the database
rejects a batch, the batch is written again line by line, so that only the line at fault is
reported and skipped. A lost
connection (a database restart) is no line's fault: it propagates, and the job's task retries
the import on a new connection, finding by content hash what was written before.

Identical solutions are one row, labeled once, but each input line that brings one is a
sample of it (``SampleLine``, keyed on the file's digest and line number) and the
solution's ``sample_count`` is recounted from those rows: majority vote and best-of-N weigh
by it, and a re-import of the same file counts nothing twice.

Labels a dataset brings (Math-Shepherd's, ProcessBench's) are automatic labels, apart from
human ones: one ``AutoLabelRun`` (method ``imported``) per dataset, label kind and file digest,
one ``AutoStepLabel`` per labeled step, so re-importing the file adds nothing.

Which lines of a file a project has seen is asked of its own solutions' sample lines: the
same file imported into another project is new there.
"""
from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models import Count, Min, OuterRef, Subquery
from django.utils import timezone

from annotate.models import (
    Annotation,
    Completion,
    Problem,
    Project,
    SampleLine,
    Solution,
    Step,
    StepLabel,
)
from annotate.pool import prm800k
from annotate.pool.importing import dataset_labels
from annotate.pool.importing.formats import Record
from annotate.pool.importing.report import Outcome
from steps.grading import Grade, judge


@dataclass(frozen=True)
class SourceFile:
    """The file the records come from: its content digest (the sample key) and its name.

    `written_since`: when the job importing it began. A line of this file recorded since then
    was written by this job (an attempt that a lost connection cut short), and the line that
    brought its solution is reported as created again, not as a duplicate of itself.
    """

    digest: str
    name: str = ""
    written_since: dt.datetime | None = None


class GradingBudget:
    """The seconds one import may spend grading, all its lines together.

    Each answer's grading is bounded (STEPWISE_GRADING_TIMEOUT), but a file of answers made to
    take that long each held a worker for minutes (40 lines, 267 s). Once the budget is spent,
    the remaining lines are imported ungraded: correctness unknown, with a note saying why.
    """

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.spent = 0.0
        self.ungraded = 0  # lines left ungraded because the budget was spent
        self.note = f"not graded: the import's grading budget ({seconds:g} s, STEPWISE_IMPORT_GRADING_BUDGET) was spent"

    def judge(self, *, answer: str | None, truth: str | None) -> Grade:
        left = self.seconds - self.spent
        if left <= 0:
            self.ungraded += 1
            return Grade(None, self.note)
        started = time.monotonic()
        # The last answer gets what is left, if that is less than its own timeout.
        grade = judge(answer=answer, truth=truth, timeout=left if left < settings.STEPWISE_GRADING_TIMEOUT else None)
        self.spent += time.monotonic() - started
        if grade.is_correct is None and self.spent >= self.seconds:
            self.ungraded += 1  # cut short by the budget, not found undecidable
            return Grade(None, self.note)
        return grade


def write_batch(records: list[Record], *, project: Project | None = None, source_file: SourceFile | None = None,
                budget: GradingBudget | None = None) -> list[Outcome]:
    """Grade and write one batch into `project` in one transaction; one outcome per record, in order.

    With `source_file`, every line is recorded as a sample of its solution; with `budget`,
    grading stops when it is spent.
    """
    project = Project.objects.given(project)
    for record in records:
        record.is_correct, record.grading_note = _grade(record, budget)
    return _write_atomically(records, project, source_file)


def _grade(record: Record, budget: GradingBudget | None) -> Grade:
    """The grade and, when an admin should know, how it was reached (unknown, no answer, second opinion)."""
    if record.given_is_correct is not None:
        return Grade(record.given_is_correct,
                     f"graded by the dataset ({record.source}), which has no ground-truth answer to grade by")
    if budget is not None:
        return budget.judge(answer=record.final_answer, truth=record.ground_truth_answer)
    return judge(answer=record.final_answer, truth=record.ground_truth_answer)


# The database, not a line, failed: the connection was lost or the server is going away
# (restarting, shutting down, out of connections), or a lock or statement timed out.
CONNECTION_FAULTS = (OperationalError, InterfaceError)


def _write_atomically(records: list[Record], project: Project, source_file: SourceFile | None) -> list[Outcome]:
    try:
        with transaction.atomic():
            return _write(records, project, source_file)
    except IntegrityError:
        # Usually another import wrote the same content between our look-up and insert:
        # looking up again finds it as a duplicate. Otherwise one line is at fault.
        pass
    except CONNECTION_FAULTS:
        raise  # for the job's task to retry (annotate/tasks.py), never a line's error
    except DatabaseError as error:
        if len(records) == 1:
            return [Outcome(line_no=records[0].line_no, status="error", error=f"rejected by the database: {error}")]
    if len(records) == 1:
        try:
            with transaction.atomic():
                return _write(records, project, source_file)
        except CONNECTION_FAULTS:
            raise
        except DatabaseError as error:
            return [Outcome(line_no=records[0].line_no, status="error", error=f"rejected by the database: {error}")]
    # Line by line, so that only the line the database rejects is reported and skipped.
    return [outcome for record in records for outcome in _write_atomically([record], project, source_file)]


def _write(records: list[Record], project: Project, source_file: SourceFile | None) -> list[Outcome]:
    problems = _problems_for(records, project)
    solutions, created = _solutions_for(records, problems, project)
    annotated = _annotations_for(records, problems, solutions, project)
    dataset_labels.write(records, solutions, project, source_file)
    if source_file is not None:
        new_ids = {solutions[r.solution_hash].pk for r in records if id(r) in created}
        created |= _created_earlier_by_this_job(records, solutions, project, source_file, created)
        _record_samples(records, solutions, project, source_file, new_ids)
    outcomes = []
    for record in records:
        solution = solutions[record.solution_hash]
        is_new = id(record) in created if record.labels is None else id(record) in annotated
        outcomes.append(Outcome(
            line_no=record.line_no, status="created" if is_new else "duplicate", solution=solution.pk,
            answer=solution.final_answer, is_correct=solution.is_correct, n_steps=len(record.steps),
            note=solution.grading_note or None,
        ))
    return outcomes


def _problems_for(records: list[Record], project: Project) -> dict[str, Problem]:
    hashes = {r.problem_hash: r for r in records}
    found = {p.content_hash: p for p in Problem.objects.filter(project=project, content_hash__in=list(hashes))}
    new = [
        Problem(
            project=project, statement=r.statement, ground_truth_answer=r.ground_truth_answer,
            ground_truth_solution=r.ground_truth_solution, source=r.source, split=r.split, content_hash=h,
        )
        for h, r in hashes.items() if h not in found
    ]
    Problem.objects.bulk_create(new)
    found.update({p.content_hash: p for p in new})
    return found


def _solutions_for(records: list[Record], problems: dict[str, Problem],
                   project: Project) -> tuple[dict[str, Solution], set[int]]:
    """The project's solutions by content hash, and the ids of the records whose solution is new."""
    hashes: dict[str, Record] = {}
    for record in records:
        hashes.setdefault(record.solution_hash, record)
    found = {s.content_hash: s for s in Solution.objects.filter(project=project, content_hash__in=list(hashes))}
    new_records = [(h, r) for h, r in hashes.items() if h not in found]
    new = [
        Solution(
            project=project, problem=problems[r.problem_hash], final_answer=r.final_answer, is_correct=r.is_correct,
            grading_note=r.grading_note,
            source=r.source, generator=r.generator, is_reference=r.is_reference, meta=r.meta,
            pre_generated_answer=r.pre_generated_answer,
            pre_generated_verifier_score=r.pre_generated_verifier_score, content_hash=h,
        )
        for h, r in new_records
    ]
    _insert_solutions(new, project)
    insert_rows(Step, ("solution_id", "index", "text", "gold_rating"), (
        (solution.pk, i, text, None)
        for solution, (_, record) in zip(new, new_records)
        for i, text in enumerate(record.steps)
    ))
    found.update({s.content_hash: s for s in new})
    return found, {id(r) for _, r in new_records}


SOLUTION_COLUMNS = (
    "project_id", "problem_id", "final_answer", "is_correct", "grading_note", "source", "generator", "is_reference",
    "pre_generated_answer", "pre_generated_verifier_score", "is_gold", "meta", "sample_count", "content_hash",
    "created_at",
)


def _insert_solutions(solutions: list[Solution], project: Project) -> None:
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
    ids = dict(Solution.objects.filter(project=project, content_hash__in=hashes).values_list("content_hash", "id"))
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
            # COPY streams the rows in one statement: several times faster than INSERTs. It runs on
            # psycopg's own cursor, so its errors are made Django's here, as a query's are (a lost
            # connection must be Django's OperationalError for the job to be retried).
            with connection.wrap_database_errors, cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            sql = f"INSERT INTO {table} ({names}) VALUES ({', '.join(['%s'] * len(columns))})"
            cursor.executemany(sql, list(rows))


def _created_earlier_by_this_job(records: list[Record], solutions: dict[str, Solution], project: Project,
                                 source_file: SourceFile, created: set[int]) -> set[int]:
    """The ids of the records, found as there already, whose line created its solution in an
    earlier attempt of this job: the line is recorded since the job began, and it is the
    solution's first sample line (written in the transaction that created the solution)."""
    if source_file.written_since is None:
        return set()
    found = [r for r in records if r.labels is None and id(r) not in created]
    if not found:
        return set()
    ours = dict(
        _lines_of(project, source_file).filter(line_no__in=[r.line_no for r in found],
                                               created_at__gte=source_file.written_since).values_list("line_no", "pk")
    )
    if not ours:
        return set()
    first = dict(
        SampleLine.objects.filter(solution_id__in={solutions[r.solution_hash].pk for r in found})
        .order_by().values("solution_id").annotate(first=Min("pk")).values_list("solution_id", "first")
    )
    return {id(r) for r in found if r.line_no in ours and first.get(solutions[r.solution_hash].pk) == ours[r.line_no]}


def _lines_of(project: Project, source_file: SourceFile):
    """The file's lines the project has recorded: another project's import of the same file is not seen."""
    return SampleLine.objects.filter(file_digest=source_file.digest, solution__project=project)


def _record_samples(
    records: list[Record], solutions: dict[str, Solution], project: Project, source_file: SourceFile,
    new_ids: set[int],
) -> None:
    """A SampleLine for each line of the file not recorded yet; recount the samples of their solutions.

    PRM800K lines are left out: a repeated PRM800K solution is another labeler's annotation.
    A solution created by this batch from one line keeps its count of 1 without a recount.
    """
    sampled = [r for r in records if r.labels is None]
    known = set(
        _lines_of(project, source_file).filter(line_no__in=[r.line_no for r in sampled])
        .values_list("line_no", flat=True)
    )
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    rows = [
        (solutions[r.solution_hash].pk, source_file.digest, r.line_no, source_file.name[:300], now)
        for r in sampled if r.line_no not in known
    ]
    if not rows:
        return
    insert_rows(SampleLine, ("solution_id", "file_digest", "line_no", "file_name", "created_at"), rows)
    # Recounted from the rows, never incremented, so the count cannot drift from its evidence.
    lines = (
        SampleLine.objects.filter(solution=OuterRef("pk")).order_by().values("solution")
        .annotate(n=Count("pk")).values("n")
    )
    per_solution = Counter(row[0] for row in rows)
    recount = [pk for pk, n in per_solution.items() if n > 1 or pk not in new_ids]
    if recount:
        Solution.objects.filter(pk__in=recount).update(sample_count=Subquery(lines))


def _annotations_for(records: list[Record], problems: dict[str, Problem], solutions: dict[str, Solution],
                     project: Project) -> set[int]:
    """Write the PRM800K labels of the records; the ids of the records annotated anew."""
    labeled = [r for r in records if r.labels is not None]
    if not labeled:
        return set()
    # (Below, `labels is not None` again only for the type checker: every record here has them.)
    keys = {(solutions[r.solution_hash].pk, r.labels.labeler) for r in labeled if r.labels is not None}
    existing = set(
        Annotation.objects.filter(
            solution_id__in={k[0] for k in keys}, labeler__in={k[1] for k in keys}
        ).values_list("solution_id", "labeler")
    )
    new: list[tuple[Record, Annotation]] = []
    for record in labeled:
        solution = solutions[record.solution_hash]
        assert record.labels is not None
        key = (solution.pk, record.labels.labeler)
        if key in existing:
            continue
        existing.add(key)  # a repeated line within the batch is a duplicate too
        new.append((record, _annotation(record, problems[record.problem_hash], solution, project)))
    Annotation.objects.bulk_create([a for _, a in new])
    _write_step_labels(new)
    return {id(r) for r, _ in new}


def _annotation(record: Record, problem: Problem, solution: Solution, project: Project) -> Annotation:
    line = record.labels
    assert line is not None
    return Annotation(
        project=project, solution=solution, labeler=line.labeler, status=Annotation.Status.SUBMITTED,
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
        for record, annotation in new if record.labels is not None  # (always: `new` holds labeled records)
        for i, step in enumerate(record.labels.steps)
    ]
    StepLabel.objects.bulk_create([s for s, _ in step_labels])
    Completion.objects.bulk_create(
        Completion(step_label=step_label, index=j, text=c.text, rating=c.rating, flagged=c.flagged, extra=c.extra)
        for step_label, step in step_labels
        for j, c in enumerate(step.completions)
    )
