"""Datasets out: PRM800K, TRL stepwise supervision, ProcessBench and per-step soft labels.

Every exporter is a generator over keyset pages of annotations (`CHUNK_SIZE` at a time),
each loaded with its related rows in six queries as plain slotted records, so memory stays
flat whatever the number of lines and 50k lines take seconds, not minutes. Files are
written to a hidden temporary file next to the destination and renamed into place only
once complete: a reader (or the download link) never sees a truncated export.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import asdict, dataclass, make_dataclass
from datetime import datetime, time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from annotate.models import (
    Annotation,
    Completion,
    ExportJob,
    FinishReason,
    JobState,
    Problem,
    QueueItem,
    Solution,
    Step,
    StepLabel,
)

FORMATS = ("prm800k", "trl", "processbench", "soft")
FORMAT_HELP = {
    "prm800k": "PRM800K: one line per submitted annotation, openai/prm800k's schema",
    "trl": "TRL stepwise supervision: prompt, completions, labels (booleans) up to the first -1",
    "processbench": "ProcessBench: id, generator, problem, steps, final_answer_correct, label",
    "soft": "Per-step soft labels: K of N annotators rated each step good",
}
CHUNK_SIZE = 2000


class ExportError(ValueError):
    """Bad export options, with a message naming the option."""


@dataclass(frozen=True)
class ExportOptions:
    """Which annotations go out, and how neutral (0) ratings count."""

    generations: tuple[int, ...] = ()
    since: datetime | None = None
    include_qc: bool = False
    finish_reasons: tuple[str, ...] = ()
    # PRM800K's 0 means "reasonable but not progress"; most PRM trainers count it as good.
    neutral_is_good: bool = True

    @classmethod
    def from_dict(cls, data: dict) -> ExportOptions:
        """Options from a dict (an ExportJob row, an API body, a form); other keys are ignored."""
        try:
            generations = tuple(int(g) for g in data.get("generations") or ())
        except (TypeError, ValueError):
            raise ExportError(f"generations: {data.get('generations')!r} is not a list of integers") from None
        reasons = tuple(data.get("finish_reasons") or ())
        unknown = sorted(set(reasons) - set(FinishReason.values))
        if unknown:
            raise ExportError(
                f"finish_reasons: unknown {', '.join(map(str, unknown))}; expected {', '.join(FinishReason.values)}"
            )
        since = data.get("since")
        return cls(
            generations=generations,
            since=parse_since(since) if isinstance(since, str) and since else since or None,
            include_qc=bool(data.get("include_qc", False)),
            finish_reasons=reasons,
            neutral_is_good=bool(data.get("neutral_is_good", True)),
        )

    def to_dict(self) -> dict:
        data = asdict(self)
        data["generations"] = list(self.generations)
        data["finish_reasons"] = list(self.finish_reasons)
        data["since"] = self.since.isoformat() if self.since else None
        return data


def parse_since(value: str) -> datetime:
    """A date or ISO datetime; naive values are read in the project's time zone."""
    parsed = parse_datetime(value)
    if parsed is None:
        day = parse_date(value)
        if day is None:
            raise ExportError(f"since: {value!r} is not a date (YYYY-MM-DD) or ISO datetime")
        parsed = datetime.combine(day, time.min)
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    return parsed


# --- Which annotations -----------------------------------------------------------------


def submitted_annotations(*, options: ExportOptions) -> QuerySet[Annotation]:
    """Submitted annotations passing the filters, in a stable order (id)."""
    qs = Annotation.objects.filter(status=Annotation.Status.SUBMITTED)
    if options.generations:
        qs = qs.filter(generation__in=options.generations)
    if options.since:
        # Imported lines carry PRM800K's own timestamp; local ones may only have created_at.
        qs = qs.filter(Q(timestamp__gte=options.since) | Q(timestamp__isnull=True, created_at__gte=options.since))
    if not options.include_qc:
        qs = qs.filter(is_quality_control=False)
    if options.finish_reasons:
        qs = qs.filter(finish_reason__in=options.finish_reasons)
    return qs.order_by("id")


# Only the columns the formats read; rows become plain records, not model instances.
ANNOTATION_FIELDS = (
    "id", "solution_id", "queue_item_id", "labeler", "timestamp", "generation", "is_quality_control",
    "is_initial_screening", "question_extra", "total_time_ms", "finish_reason",
)
SOLUTION_FIELDS = (
    "id", "problem_id", "final_answer", "is_correct", "source", "generator", "pre_generated_answer",
    "pre_generated_verifier_score",
)
PROBLEM_FIELDS = ("id", "statement", "ground_truth_solution", "ground_truth_answer")
STEP_FIELDS = ("solution_id", "index", "text")
STEP_LABEL_FIELDS = ("id", "annotation_id", "index", "chosen_completion", "human_completion", "time_ms")
COMPLETION_FIELDS = ("step_label_id", "index", "text", "rating", "flagged", "extra")


class Related(list):
    """A relation loaded for a whole chunk; `.all()` reads like a prefetched related manager."""

    def all(self) -> Related:
        return self


def record_type(name: str, columns: tuple[str, ...], relations: tuple[str, ...] = ()) -> type:
    """A slotted record class: a row's columns, then relations attached after loading.

    Five times cheaper to build than a SimpleNamespace, and far cheaper than a model instance.
    """
    cls = make_dataclass(name, [*columns, *((r, object, None) for r in relations)], slots=True, eq=False)
    cls.columns = columns
    return cls


AnnotationRecord = record_type("AnnotationRecord", ANNOTATION_FIELDS, ("solution", "queue_item", "step_labels"))
SolutionRecord = record_type("SolutionRecord", SOLUTION_FIELDS, ("problem", "steps"))
ProblemRecord = record_type("ProblemRecord", PROBLEM_FIELDS)
QueueItemRecord = record_type("QueueItemRecord", ("id", "score_at_selection"))
StepRecord = record_type("StepRecord", STEP_FIELDS)
StepLabelRecord = record_type("StepLabelRecord", STEP_LABEL_FIELDS, ("completions",))
CompletionRecord = record_type("CompletionRecord", COMPLETION_FIELDS)

# JSON columns are read as text and decoded here: nearly all hold `{}` or null, and Django's
# json.loads per value was a third of a PRM800K export's time.
JSON_FIELDS = {"question_extra", "human_completion", "extra"}


def _decode(text: str | None) -> object:
    if text is None:
        return None
    return {} if text == "{}" else json.loads(text)


def _records(qs: QuerySet, record: type, limit: int | None = None) -> Iterator[Any]:
    columns = record.columns
    positions = [i for i, f in enumerate(columns) if f in JSON_FIELDS]
    qs = qs.annotate(**{f"{columns[i]}_text": Cast(columns[i], TextField()) for i in positions})
    rows = qs.values_list(*(f"{f}_text" if f in JSON_FIELDS else f for f in columns))
    if limit is not None:
        rows = rows[:limit]
    if not positions:
        yield from (record(*row) for row in rows)
        return
    for row in rows:
        row = list(row)
        for i in positions:
            row[i] = _decode(row[i])
        yield record(*row)


def _group(parents: dict, children: Iterable, key: str, attr: str) -> None:
    for parent in parents.values():
        setattr(parent, attr, Related())
    for child in children:
        getattr(parents[getattr(child, key)], attr).append(child)


def _among(field: str, ids: Collection[int]) -> Q:
    """Rows whose `field` is one of `ids`, as cheaply as the ids allow.

    A chunk's ids are mostly consecutive, and a range costs nothing to bind where a
    2,000-value IN list cost a fifth of an export. The range may take in a few rows that are
    not wanted, which the caller drops; when the ids are spread out (a filtered export),
    the IN list keeps each chunk's reads bounded by its own rows.
    """
    low, high = min(ids), max(ids)
    if high - low < 2 * len(ids):
        return Q(**{f"{field}__gte": low, f"{field}__lte": high})
    return Q(**{f"{field}__in": ids})


def load_chunk(annotations: QuerySet[Annotation], limit: int | None = None) -> list[AnnotationRecord]:
    """One chunk of annotations (the first `limit`) with the rows every format reads.

    Attribute names are the models' (`annotation.solution.problem.statement`,
    `annotation.step_labels.all()`), so `prm800k.line_for_annotation` reads these records
    as it reads prefetched instances, at a fraction of the cost of building model objects
    (about a million of them for 50k annotations). Related rows are selected by the ids in
    hand: an IN list is planned as index lookups whatever the table statistics say, where a
    subquery repeating the filters was planned as a scan of every annotation per chunk.
    """
    rows = {a.id: a for a in _records(annotations, AnnotationRecord, limit)}
    if not rows:
        return []
    solution_ids = {a.solution_id for a in rows.values()}
    solutions = {s.id: s for s in _records(Solution.objects.filter(_among("id", solution_ids)), SolutionRecord)
                 if s.id in solution_ids}
    problem_ids = {s.problem_id for s in solutions.values()}
    problems = {p.id: p for p in _records(Problem.objects.filter(_among("id", problem_ids)), ProblemRecord)
                if p.id in problem_ids}
    queue_ids = {a.queue_item_id for a in rows.values()} - {None}
    queue_items = {q.id: q for q in _records(QueueItem.objects.filter(id__in=queue_ids), QueueItemRecord)}
    steps = Step.objects.filter(_among("solution_id", solution_ids)).order_by("solution_id", "index")
    _group(solutions, (s for s in _records(steps, StepRecord) if s.solution_id in solutions), "solution_id", "steps")
    step_labels = StepLabel.objects.filter(_among("annotation_id", rows))
    labels = {label.id: label for label in _records(step_labels.order_by("annotation_id", "index"), StepLabelRecord)
              if label.annotation_id in rows}
    completions = Completion.objects.filter(_among("step_label_id", labels)) if labels else Completion.objects.none()
    completions = (c for c in _records(completions.order_by("step_label_id", "index"), CompletionRecord)
                   if c.step_label_id in labels)
    _group(labels, completions, "step_label_id", "completions")
    _group(rows, labels.values(), "annotation_id", "step_labels")
    for solution in solutions.values():
        solution.problem = problems[solution.problem_id]
    for annotation in rows.values():
        annotation.solution = solutions[annotation.solution_id]
        annotation.queue_item = queue_items.get(annotation.queue_item_id)
    return list(rows.values())


def annotation_chunks(*, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[list[AnnotationRecord]]:
    """The filtered annotations in id order, a chunk at a time (keyset pages, no open cursor)."""
    qs = submitted_annotations(options=options)
    last = 0
    while rows := load_chunk(qs.filter(id__gt=last), limit=chunk_size):
        yield rows
        last = rows[-1].id


def annotations(*, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[AnnotationRecord]:
    for chunk in annotation_chunks(options=options, chunk_size=chunk_size):
        yield from chunk


# --- One annotation's path through the steps ----------------------------------------------


def _human_text(human_completion: object) -> str:
    if isinstance(human_completion, dict):
        return str(human_completion.get("text") or "")
    return str(human_completion)


def trajectory(annotation: Annotation) -> list[tuple[str, int]]:
    """(text, rating) of the steps the annotator walked, ending at the first -1.

    At each step the chosen completion continues the path; a human completion counts as +1.
    A step with neither (PRM800K's last step of a `found_error` line) ends the path at its
    first -1 completion. An unrated step ends the path before it: it has no label to give.
    """
    path: list[tuple[str, int]] = []
    for step_label in annotation.step_labels.all():
        completions = list(step_label.completions.all())
        chosen = next((c for c in completions if c.index == step_label.chosen_completion), None)
        if chosen is not None:
            step = (chosen.text, chosen.rating)
        elif step_label.human_completion is not None:
            step = (_human_text(step_label.human_completion), 1)
        else:
            wrong = next((c for c in completions if c.rating == -1), None)
            if wrong is not None:
                path.append((wrong.text, -1))
            break
        if step[1] is None:
            break
        path.append(step)
        if step[1] == -1:
            break
    return path


def is_good(rating: int | None, *, neutral_is_good: bool) -> bool:
    return rating == 1 or (rating == 0 and neutral_is_good)


def first_error(ratings: Iterable[int | None]) -> int:
    """0-based index of the first -1, or -1 when there is none (ProcessBench's `label`)."""
    return next((i for i, r in enumerate(ratings) if r == -1), -1)


# --- Formats -------------------------------------------------------------------------------


def prm800k_lines(*, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    from annotate import prm800k  # the import side owns the schema, both ways

    for annotation in annotations(options=options, chunk_size=chunk_size):
        yield prm800k.line_for_annotation(annotation)


def trl_rows(*, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """TRL's stepwise-supervision columns; annotations with no rated step are skipped."""
    for annotation in annotations(options=options, chunk_size=chunk_size):
        path = trajectory(annotation)
        if not path:
            continue
        yield {
            "prompt": annotation.solution.problem.statement,
            "completions": [text for text, _ in path],
            "labels": [is_good(rating, neutral_is_good=options.neutral_is_good) for _, rating in path],
        }


def processbench_rows(*, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """ProcessBench rows, one per annotation: the solution's steps and its first error."""
    for annotation in annotations(options=options, chunk_size=chunk_size):
        solution = annotation.solution
        path = trajectory(annotation)
        steps = [step.text for step in solution.steps.all()] or [text for text, _ in path]
        yield {
            "id": f"{solution.source or 'stepwise'}-{solution.id}-{annotation.id}",
            "generator": solution.generator or None,
            "problem": solution.problem.statement,
            "steps": steps,
            "final_answer_correct": solution.is_correct,
            "label": first_error(rating for _, rating in path),
        }


def soft_label_rows(*, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """Per solution and step: K annotators rated it good out of N who rated it."""
    qs = submitted_annotations(options=options)
    last = 0
    while True:
        # Keyset pages of solutions, so all of a solution's annotations land in one chunk.
        page = qs.filter(solution_id__gt=last).order_by("solution_id").values_list("solution_id", flat=True)
        solution_ids = list(page.distinct()[:chunk_size])
        if not solution_ids:
            return
        by_solution: dict[int, list[AnnotationRecord]] = {}
        for annotation in load_chunk(qs.filter(solution_id__in=solution_ids)):
            by_solution.setdefault(annotation.solution_id, []).append(annotation)
        for solution_id in solution_ids:
            yield _soft_labels(by_solution[solution_id], neutral_is_good=options.neutral_is_good)
        last = solution_ids[-1]


def _soft_labels(annotations: list[AnnotationRecord], *, neutral_is_good: bool) -> dict:
    solution = annotations[0].solution
    steps = [step.text for step in solution.steps.all()]
    good, rated = [0] * len(steps), [0] * len(steps)
    for annotation in annotations:
        for i, (text, rating) in enumerate(trajectory(annotation)[: len(steps)]):
            # A rating counts for pool step i only if the annotator rated that very text.
            if text.strip() != steps[i].strip():
                continue
            rated[i] += 1
            good[i] += is_good(rating, neutral_is_good=neutral_is_good)
    return {
        "id": solution.id,
        "problem": solution.problem.statement,
        "steps": steps,
        "k": good,
        "n": rated,
        "soft_labels": [k / n if n else None for k, n in zip(good, rated)],
        "annotations": len(annotations),
    }


ROWS: dict[str, Callable[..., Iterator[dict]]] = {
    "prm800k": prm800k_lines,
    "trl": trl_rows,
    "processbench": processbench_rows,
    "soft": soft_label_rows,
}


def check_format(format: str) -> str:
    if format not in ROWS:
        raise ExportError(f"format: unknown {format!r}; expected one of {', '.join(FORMATS)}")
    return format


def iter_rows(*, format: str, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    return ROWS[check_format(format)](options=options, chunk_size=chunk_size)


def iter_jsonl(*, format: str, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[str]:
    """JSON Lines, one string per line, for streaming responses and files alike."""
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": ")).encode
    for row in iter_rows(format=format, options=options, chunk_size=chunk_size):
        yield dumps(row) + "\n"


def count_rows(*, format: str, options: ExportOptions) -> int:
    """How many lines the export will have (soft labels: one per solution)."""
    annotations = submitted_annotations(options=options)
    if check_format(format) == "soft":
        return annotations.values("solution_id").distinct().count()
    return annotations.count()


# --- Files ---------------------------------------------------------------------------------


def write_export(
    *,
    path: Path | str,
    format: str,
    options: ExportOptions,
    on_progress: Callable[[int], None] | None = None,
    progress_every: int = CHUNK_SIZE,
) -> int:
    """Write an export to `path` atomically; return the number of lines written."""
    path = Path(path)
    check_format(format)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Same folder as the destination, so the final rename never crosses file systems.
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    lines = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8", buffering=1 << 20) as out:
            for line in iter_jsonl(format=format, options=options):
                out.write(line)
                lines += 1
                if on_progress and lines % progress_every == 0:
                    on_progress(lines)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    if on_progress:
        on_progress(lines)
    return lines


def export_path(job: ExportJob) -> Path:
    return Path(settings.EXPORTS_DIR) / f"export-{job.pk}-{job.format}.jsonl"


def download_name(job: ExportJob) -> str:
    stamp = (job.finished_at or job.created_at or timezone.now()).strftime("%Y%m%d-%H%M%S")
    return f"stepwise-{job.format}-{stamp}.jsonl"


def create_export_job(*, format: str, options: ExportOptions, user=None) -> ExportJob:
    """An ExportJob row, queued for a worker once the transaction commits."""
    from annotate.tasks import export_task

    job = ExportJob.objects.create(format=check_format(format), options=options.to_dict(), created_by=user)
    export_task.delay_on_commit(job.pk)
    return job


def run_export_job(*, job_id: int) -> ExportJob:
    """Run one ExportJob: count, write with progress in the row, mark it done.

    Idempotent: a finished job is left alone; a redelivered one rewrites its own file.
    """
    job = ExportJob.objects.get(pk=job_id)
    if job.state == JobState.SUCCEEDED:
        return job
    try:
        options = ExportOptions.from_dict(job.options)
        total = count_rows(format=job.format, options=options)
        ExportJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING, total=total, done=0, error="")
        path = export_path(job)

        def progress(done: int) -> None:
            ExportJob.objects.filter(pk=job.pk).update(done=done)

        lines = write_export(path=path, format=job.format, options=options, on_progress=progress)
    except Exception as error:
        ExportJob.objects.filter(pk=job.pk).update(
            state=JobState.FAILED, error=f"{type(error).__name__}: {error}", finished_at=timezone.now()
        )
        raise
    ExportJob.objects.filter(pk=job.pk).update(
        state=JobState.SUCCEEDED, path=str(path), lines=lines, done=lines, total=max(total, lines),
        finished_at=timezone.now(),
    )
    job.refresh_from_db()
    return job


def finished_file(job: ExportJob) -> Path | None:
    """The job's file, only when the job succeeded and the file is really there."""
    if job.state != JobState.SUCCEEDED or not job.path:
        return None
    path = Path(job.path)
    return path if path.is_file() else None

