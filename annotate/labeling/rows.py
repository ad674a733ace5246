"""A labeling task's rows as the fast path reads and changes them, and the one way to reach them.

`annotation_for(user=..., pk=..., project=...)` names a user's annotation in a project without
reading it: every read of it finds it only if it is that user's and in that project
(Annotation.DoesNotExist otherwise), so nobody reaches another person's task, or their own in
another project, by id, and an action reads the row once, not twice. `read` gives the
annotation and its steps for the page; `act` runs an action on them, and `change` locks them
for one in the caller's transaction: one statement reads them with the queue item's lease (kept:
queue_items.keep_lease) and refuses a submitted task, and the action's writes are made together,
with the annotation's `updated_at`: a change of a step's rating or time is a change of the
annotation. Rows are NamedTuples.
"""
from __future__ import annotations

import datetime as dt
from collections import namedtuple
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from django.db import connection, transaction
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

from annotate.labeling import queue_items
from annotate.labeling.refusals import AlreadySubmitted, Conflict
from annotate.models import Annotation, LabelingConfig, Project
from infra import statements


class AnnotationRef(NamedTuple):
    """A user's annotation by its key, not read yet: what `annotation_for` gives."""

    pk: int
    annotator_id: int
    project_id: int


class AnnotationRow(NamedTuple):
    """What the labeling path reads of an annotation (the names are the model's)."""

    pk: int
    annotator_id: int
    project_id: int
    solution_id: int
    status: str
    finish_reason: str | None
    created_at: dt.datetime
    total_time_ms: int | None
    queue_item_id: int | None
    is_quality_control: bool
    is_initial_screening: bool

    @property
    def is_submitted(self) -> bool:
        return self.status == Annotation.Status.SUBMITTED

    @classmethod
    def of(cls, annotation: Annotation) -> AnnotationRow:
        return cls._make(getattr(annotation, name) for name in cls._fields)


class StepValues(NamedTuple):
    """One step of the task: its first completion's text, rating and flag, the step's time,
    the annotator's rewrite of it (PRM800K's human_completion) and what the annotator was
    shown of the model (annotate.labeling.assistance)."""

    step_index: int  # (a field named `index` would hide tuple.index)
    text: str
    rating: int | None
    flagged: bool | None
    time_ms: int | None
    human_completion: dict | None
    assistance: dict | None = None


# What `read` and `change` take: a reference, or an annotation already read (a claim's).
AnnotationOrRef = AnnotationRef | Annotation


def annotation_for(*, user, pk: int, project=None) -> AnnotationRef:
    """The user's annotation `pk` in `project` (the sole one when None), for `read` or `change`,
    which find it only if it is theirs and the project's."""
    return AnnotationRef(pk, user.pk, Project.objects.given(project).pk)


# The columns of each read: the field each row type names, and the ORM path it is read from.
_STEP_COLUMNS = {
    "step_index": "step_labels__index", "text": "step_labels__completions__text",
    "rating": "step_labels__completions__rating", "flagged": "step_labels__completions__flagged",
    "time_ms": "step_labels__time_ms", "human_completion": "step_labels__human_completion",
    "assistance": "step_labels__assistance",
}
_LEASE_COLUMNS = {"item_status": "queue_item__status", "leased_to": "queue_item__leased_to_id",
                  "expires_at": "queue_item__lease_expires_at"}
# So the writes are by primary key, not through a join.
_ID_COLUMNS = {"completion_id": "step_labels__completions__id", "step_label_id": "step_labels__id"}
_READ_COLUMNS = {**{name: name for name in AnnotationRow._fields}, **_STEP_COLUMNS}
_LOCKED_COLUMNS = {**_READ_COLUMNS, **_LEASE_COLUMNS, **_ID_COLUMNS}
# Named by the maps' keys, which mypy cannot read from a dict.
_ReadRow = namedtuple("_ReadRow", _READ_COLUMNS)  # type: ignore[misc]
_LockedRow = namedtuple("_LockedRow", _LOCKED_COLUMNS)  # type: ignore[misc]


def _steps_of(pk: int, annotator_id: int, project_id: int) -> QuerySet:
    """One row per step of the owner's annotation `pk`, in order (none if it is not theirs or not
    the project's)."""
    return (Annotation.objects.filter(pk=pk, annotator_id=annotator_id, project_id=project_id,
                                      step_labels__completions__index=0)
            .order_by("step_labels__index"))


# Built once per connection (infra/statements.py).
_READ = statements.Compiled(lambda pk, annotator_id, project_id: (
    _steps_of(pk, annotator_id, project_id).values_list(*_READ_COLUMNS.values())
), row=_ReadRow)
_LOCKED_READ = statements.Compiled(lambda pk, annotator_id, project_id: (
    _steps_of(pk, annotator_id, project_id).select_for_update(of=("self",)).values_list(*_LOCKED_COLUMNS.values())
), row=_LockedRow)
# The annotation row's version: PostgreSQL gives a row a new xmin at every update.
_XMIN = RawSQL(f'"{Annotation._meta.db_table}"."xmin"::text', ())
_VersionedRow = namedtuple("_VersionedRow", [*_LOCKED_COLUMNS, "xmin"])  # type: ignore[misc]
_VERSIONED_READ = statements.Compiled(lambda pk, annotator_id, project_id: (
    _steps_of(pk, annotator_id, project_id).annotate(row_xmin=_XMIN).values_list(*_LOCKED_COLUMNS.values(), "row_xmin")
), row=_VersionedRow)


def _key(annotation: AnnotationOrRef) -> dict[str, int | None]:
    return {"pk": annotation.pk, "annotator_id": annotation.annotator_id, "project_id": annotation.project_id}


def _annotation(row) -> AnnotationRow:
    return AnnotationRow._make(row[: len(AnnotationRow._fields)])


def _step(row) -> StepValues:
    return StepValues(row.step_index, row.text, row.rating, row.flagged, row.time_ms, row.human_completion,
                      row.assistance)


def read(annotation: AnnotationOrRef) -> tuple[AnnotationRow, list[StepValues]]:
    """The owner's annotation and its steps, for the page; Annotation.DoesNotExist if not theirs."""
    found = _READ.rows(**_key(annotation))
    if not found:  # Not theirs, or a solution without steps.
        return AnnotationRow.of(Annotation.objects.get(**_key(annotation))), []
    return _annotation(found[0]), [_step(row) for row in found]


@dataclass
class Change:
    """An annotation locked for an action: its row and steps as read, and the writes gathered."""

    annotation: AnnotationRow
    rows: list[StepValues]
    completion_ids: list[int]
    step_label_ids: list[int]
    writes: statements.RowWrites

    @property
    def ratings(self) -> list[int | None]:
        return [step.rating for step in self.rows]

    def stored_times(self) -> dict[int, tuple[int, int]]:
        """Step index -> (its StepLabel's id, the active ms stored for it)."""
        return {step.step_index: (pk, step.time_ms or 0) for step, pk in zip(self.rows, self.step_label_ids)}


T = TypeVar("T")
# Reads an action makes when the task changed between its read and its write (a double click,
# a second tab): each sees the change that came in between, so a third is already rare.
_ATTEMPTS = 3


def act(annotation: AnnotationOrRef, config: LabelingConfig, action: Callable[[Change], T]) -> T:
    """Run one action on the owner's task (Annotation.DoesNotExist if not theirs, AlreadySubmitted
    once submitted): `action` judges the task as read and gathers writes, which are made together,
    with the annotation's `updated_at`, as of that read or not at all; returns what `action` does.

    On PostgreSQL without a transaction or a lock (BEGIN, the row lock and COMMIT were a third of
    the CPU, Django's and PostgreSQL's, that a rating's read and write cost): the read brings the
    annotation row's xmin, and the one statement that writes applies only while the row still has
    it (statements.RowWrites); when a change came in between, the action runs again on a new read.
    Elsewhere as `change` does it."""
    if connection.vendor != "postgresql":
        return _act_locked(annotation, config, action)
    for _ in range(_ATTEMPTS):
        found = _VERSIONED_READ.rows(**_key(annotation))
        if not found:  # Not theirs, or a solution without steps: as `change` answers them.
            return _act_locked(annotation, config, action)
        read = _opened(found, config, statements.RowWrites())
        result = action(read)
        if not read.writes:
            return result
        read.writes.update(Annotation, read.annotation.pk)  # statements set its updated_at
        if read.writes.write(if_version=(Annotation, read.annotation.pk, found[0].xmin)):
            return result
    raise Conflict("this task kept changing while this action was saved (another tab?): reload the page")


def _act_locked(annotation: AnnotationOrRef, config: LabelingConfig, action: Callable[[Change], T]) -> T:
    with transaction.atomic(), change(annotation, config) as read:
        return action(read)


@contextmanager
def change(annotation: AnnotationOrRef, config: LabelingConfig) -> Iterator[Change]:
    """Lock the owner's annotation for an action (Annotation.DoesNotExist if not theirs), refuse it
    if submitted, keep its lease; then, when the block ends without an error, write what it
    gathered in `writes`, the annotation's auto_now fields with them. In the caller's transaction,
    for an action that writes more than the task's rows (a submit); one that does not: `act`."""
    with statements.RowWrites() as writes:
        opened = _lock(annotation, config, writes)
        yield opened
        if writes:
            writes.update(Annotation, opened.annotation.pk)  # statements set its updated_at


def _lock(annotation: AnnotationOrRef, config: LabelingConfig, writes: statements.RowWrites) -> Change:
    """One statement: the same read checks the owner and brings the steps and the lease, which
    is written only when it needs renewing."""
    found = _LOCKED_READ.rows(**_key(annotation))
    if not found:  # Not theirs, or a solution without steps.
        locked = Annotation.objects.select_for_update().get(**_key(annotation))
        row = _open(AnnotationRow.of(locked))
        queue_items.renew_lease(annotation=row, seconds=config.lease_duration)
        return Change(row, [], [], [], writes)
    return _opened(found, config, writes)


def _opened(found: list, config: LabelingConfig, writes: statements.RowWrites) -> Change:
    """The task as read for an action, refused if submitted, its lease kept."""
    first = found[0]
    row = _open(_annotation(first))
    queue_items.keep_lease(annotation=row, seconds=config.lease_duration, item_status=first.item_status,
                           leased_to=first.leased_to, expires_at=first.expires_at)
    return Change(row, [_step(r) for r in found], [r.completion_id for r in found],
                  [r.step_label_id for r in found], writes)


def _open(annotation: AnnotationRow) -> AnnotationRow:
    if annotation.is_submitted:
        raise AlreadySubmitted(f"annotation {annotation.pk} was already submitted")
    return annotation
