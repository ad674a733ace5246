"""Loading annotations for export fast: chunks of plain slotted records.

Each chunk of `CHUNK_SIZE` annotations is loaded with its related rows in seven queries as
plain records, not model instances, so memory stays flat whatever the number of lines (but for
the selected ids, read once: a few megabytes for 100k) and 50k lines take seconds, not minutes.
The records are shaped like prefetched instances (`annotation.step_labels.all()`,
`.completions.all()`), so `prm800k.line_for_annotation` and `verdicts.verdicts` read them as
they read the models.
"""
# No `from __future__ import annotations`: it binds the name `annotations`, which this module's
# `annotations()` takes over, and the type checker would keep the first binding.
import json
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import make_dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from django.db.models import Max, Q, QuerySet, TextField
from django.db.models.functions import Cast

from annotate.models import (
    Annotation,
    Completion,
    Problem,
    Project,
    QueueItem,
    RatingOverride,
    Solution,
    Step,
    StepLabel,
)
from annotate.pool.exporting.options import CHUNK_SIZE, ExportOptions, selected_annotations

# Only the columns the formats read; rows become plain records, not model instances.
ANNOTATION_FIELDS = (
    "id", "solution_id", "queue_item_id", "annotator_id", "labeler", "timestamp", "created_at", "generation",
    "is_quality_control", "is_initial_screening", "question_extra", "total_time_ms", "finish_reason",
    "guideline_version",
)
SOLUTION_FIELDS = (
    "id", "problem_id", "final_answer", "is_correct", "source", "generator", "pre_generated_answer",
    "pre_generated_verifier_score", "meta",
)
PROBLEM_FIELDS = ("id", "statement", "ground_truth_solution", "ground_truth_answer")
STEP_FIELDS = ("solution_id", "index", "text")
STEP_LABEL_FIELDS = ("id", "annotation_id", "index", "chosen_completion", "human_completion", "time_ms", "assistance")
COMPLETION_FIELDS = ("step_label_id", "index", "text", "rating", "flagged", "extra")


_T = TypeVar("_T")


class Related(list[_T]):
    """A relation loaded for a whole chunk; `.all()` reads like a prefetched related manager."""

    def all(self) -> "Related[_T]":
        return self


_R = TypeVar("_R", bound="Record")


def record_type(name: str, columns: tuple[str, ...], relations: tuple[str, ...] = ()) -> "type[Record]":
    """A slotted record class: a row's columns, then relations attached after loading.

    Five times cheaper to build than a SimpleNamespace, and far cheaper than a model instance.
    """
    cls: type[Record] = make_dataclass(
        name, [*columns, *((r, object, None) for r in relations)], slots=True, eq=False
    )
    cls.columns = columns
    return cls


if TYPE_CHECKING:
    class Record:
        """What `record_type` builds: made from a row's values in `columns` order."""

        columns: ClassVar[tuple[str, ...]]

        def __init__(self, *values: Any) -> None: ...

    # The classes `record_type` builds below, spelled out for the type checker: the columns
    # (the *_FIELDS tuples, in their order) typed as the models type them, then the relations
    # `load_chunk` attaches to every record it returns. JSON columns hold any decoded JSON.
    class ProblemRecord(Record):
        id: int
        statement: str
        ground_truth_solution: str | None
        ground_truth_answer: str | None

    class StepRecord(Record):
        solution_id: int
        index: int
        text: str

    class SolutionRecord(Record):
        id: int
        problem_id: int
        final_answer: str | None
        is_correct: bool | None
        source: str
        generator: str
        pre_generated_answer: str | None
        pre_generated_verifier_score: float | None
        meta: Any
        problem: ProblemRecord
        steps: Related[StepRecord]

    class QueueItemRecord(Record):
        id: int
        score_at_selection: float | None

    class CompletionRecord(Record):
        step_label_id: int
        index: int
        text: str
        rating: int | None
        flagged: bool | None
        extra: Any

    class StepLabelRecord(Record):
        id: int
        annotation_id: int
        index: int
        chosen_completion: int | None
        human_completion: Any
        time_ms: int | None
        assistance: Any
        completions: Related[CompletionRecord]

    class AnnotationRecord(Record):
        id: int
        solution_id: int
        queue_item_id: int | None
        annotator_id: int | None
        labeler: str
        timestamp: datetime | None
        created_at: datetime
        generation: int | None
        is_quality_control: bool
        is_initial_screening: bool
        question_extra: Any
        total_time_ms: int | None
        finish_reason: str | None
        guideline_version: int | None
        solution: SolutionRecord
        queue_item: QueueItemRecord | None
        step_labels: Related[StepLabelRecord]
        reviewed_at: datetime | None
else:
    AnnotationRecord = record_type(
        "AnnotationRecord", ANNOTATION_FIELDS, ("solution", "queue_item", "step_labels", "reviewed_at")
    )
    SolutionRecord = record_type("SolutionRecord", SOLUTION_FIELDS, ("problem", "steps"))
    ProblemRecord = record_type("ProblemRecord", PROBLEM_FIELDS)
    QueueItemRecord = record_type("QueueItemRecord", ("id", "score_at_selection"))
    StepRecord = record_type("StepRecord", STEP_FIELDS)
    StepLabelRecord = record_type("StepLabelRecord", STEP_LABEL_FIELDS, ("completions",))
    CompletionRecord = record_type("CompletionRecord", COMPLETION_FIELDS)

# JSON columns are read as text and decoded here: nearly all hold `{}` or null, and Django's
# json.loads per value was a third of a PRM800K export's time.
JSON_FIELDS = {"question_extra", "human_completion", "extra", "meta", "assistance"}


def _decode(text: str | None) -> object:
    if text is None:
        return None
    return {} if text == "{}" else json.loads(text)


def _records(qs: QuerySet[Any], record: type[_R], limit: int | None = None) -> Iterator[_R]:
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
        values = list(row)
        for i in positions:
            values[i] = _decode(values[i])
        yield record(*values)


def _group(parents: Mapping[int, object], children: Iterable[object], key: str, attr: str) -> None:
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
    queue_ids = {a.queue_item_id for a in rows.values() if a.queue_item_id is not None}
    queue_items: dict[int | None, QueueItemRecord] = {
        q.id: q for q in _records(QueueItem.objects.filter(id__in=queue_ids), QueueItemRecord)
    }
    steps = Step.objects.filter(_among("solution_id", solution_ids)).order_by("solution_id", "index")
    _group(solutions, (s for s in _records(steps, StepRecord) if s.solution_id in solutions), "solution_id", "steps")
    step_labels = StepLabel.objects.filter(_among("annotation_id", rows))
    labels = {label.id: label for label in _records(step_labels.order_by("annotation_id", "index"), StepLabelRecord)
              if label.annotation_id in rows}
    completion_rows = (Completion.objects.filter(_among("step_label_id", labels)) if labels
                       else Completion.objects.none())
    completions = (c for c in _records(completion_rows.order_by("step_label_id", "index"), CompletionRecord)
                   if c.step_label_id in labels)
    _group(labels, completions, "step_label_id", "completions")
    _group(rows, labels.values(), "annotation_id", "step_labels")
    for solution in solutions.values():
        solution.problem = problems[solution.problem_id]
    # When a reviewer last overrode each annotation: ProcessBench takes a reviewed label.
    overrides = RatingOverride.objects.filter(_among("step_label__annotation_id", rows))
    reviewed = dict(overrides.values("step_label__annotation_id").annotate(last=Max("created_at"))
                    .values_list("step_label__annotation_id", "last"))
    for annotation in rows.values():
        annotation.solution = solutions[annotation.solution_id]
        annotation.queue_item = queue_items.get(annotation.queue_item_id)
        annotation.reviewed_at = reviewed.get(annotation.id)
    return list(rows.values())


def _slices(ids: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(ids), size):
        yield ids[start:start + size]


def annotation_chunks(*, project: Project, options: ExportOptions,
                      chunk_size: int = CHUNK_SIZE) -> Iterator[list[AnnotationRecord]]:
    """The project's filtered annotations in id order, a chunk at a time.

    The selected ids are read once, through the project's rows only, then each chunk by its own
    ids (a contiguous slice of them, so a range where they are dense, with the filters again):
    the work is proportional to the project whatever else the site holds. Keyset pages
    (`id > last ORDER BY id LIMIT n`) were planned either as a walk of the primary key through
    every project's rows or as a scan of the whole project per page.
    """
    qs = selected_annotations(project=project, options=options)
    for ids in _slices(list(qs.values_list("id", flat=True)), chunk_size):
        yield load_chunk(qs.filter(_among("id", ids)))


def annotations(*, project: Project, options: ExportOptions,
                chunk_size: int = CHUNK_SIZE) -> Iterator[AnnotationRecord]:
    for chunk in annotation_chunks(project=project, options=options, chunk_size=chunk_size):
        yield from chunk


def solution_groups(*, project: Project, options: ExportOptions,
                    chunk_size: int = CHUNK_SIZE) -> Iterator[list[AnnotationRecord]]:
    """The project's filtered annotations grouped by solution, in solution id order.

    Pages of solutions rather than annotations, so all of a solution's annotations land in one
    chunk; the solutions are read once, as `annotation_chunks` reads its ids.
    """
    qs = selected_annotations(project=project, options=options)
    solution_ids = list(qs.order_by("solution_id").values_list("solution_id", flat=True).distinct())
    for page in _slices(solution_ids, chunk_size):
        by_solution: dict[int, list[AnnotationRecord]] = {}
        for annotation in load_chunk(qs.filter(_among("solution_id", page))):
            by_solution.setdefault(annotation.solution_id, []).append(annotation)
        yield from (by_solution[solution_id] for solution_id in page)
