"""A queue item after it is queued: leased to one annotator, kept leased by their activity, done
when they submit, released or lapsed back to waiting, retired when its solution becomes everyone's.

A lease lapses unless activity renews it, so a closed tab's item comes back. Gold items and the
screening set are shown to every annotator and never leased: their annotation is the whole
record, so nothing here touches an item for them.
"""
from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from annotate.labeling.refusals import LeaseLost
from annotate.models import Annotation, LabelingConfig, Project, QueueItem, Solution
from infra import statements

_EXPIRE = statements.Compiled(lambda now: statements.updating(
    QueueItem.objects.filter(status=QueueItem.Status.LEASED, lease_expires_at__lt=now),
    status=QueueItem.Status.AVAILABLE, leased_to=None, lease_expires_at=None,
), datetimes=("now",))


def is_leased(annotation) -> bool:
    """Whether the annotation's work came from a leased item (not gold, not screening)."""
    item = annotation.queue_item_id
    return item is not None and not annotation.is_initial_screening and not annotation.is_quality_control


def renew(annotation, now: dt.datetime, seconds: int | None = None) -> int:
    """Extend the lease; take the item back if it lapsed but nobody took it. 1 if held."""
    if not is_leased(annotation):
        return 1
    config_seconds = seconds or LabelingConfig.of(annotation.project_id).lease_duration
    mine = Q(status=QueueItem.Status.LEASED, leased_to=annotation.annotator_id)
    return QueueItem.objects.filter(mine | Q(status=QueueItem.Status.AVAILABLE), pk=annotation.queue_item_id).update(
        status=QueueItem.Status.LEASED, leased_to=annotation.annotator_id,
        lease_expires_at=now + dt.timedelta(seconds=config_seconds),
    )


def renew_lease(*, annotation, now: dt.datetime | None = None, seconds: int | None = None) -> None:
    """Keep the task's item leased (called on every action). Raises LeaseLost."""
    if renew(annotation, now or timezone.now(), seconds) != 1:
        raise LeaseLost("this task was idle too long and went to someone else: go to the next task")


def keep_lease(*, annotation, seconds: int, item_status: str | None, leased_to: int | None,
               expires_at: dt.datetime | None, now: dt.datetime | None = None) -> None:
    """renew_lease, given the item's lease as the caller read it under the annotation's lock:
    no write while this annotator holds it with more than half its time left, so most actions
    leave the queue alone. (Nobody else can take an item whose lease has not lapsed.)"""
    now = now or timezone.now()
    held = item_status == QueueItem.Status.LEASED and leased_to == annotation.annotator_id
    if is_leased(annotation) and held and expires_at is not None \
            and expires_at - now > dt.timedelta(seconds=seconds / 2):
        return
    renew_lease(annotation=annotation, now=now, seconds=seconds)


def finish_item(*, annotation, writes: statements.RowWrites) -> None:
    """Mark the task's item done, with the submit's other writes (one statement on PostgreSQL).

    By its key alone: the submit kept the lease (keep_lease) under the annotation's lock in
    this transaction, so the item is this annotator's until it commits (a lease is taken over
    only after it lapsed, and keep_lease leaves it at least half its time).
    """
    if is_leased(annotation):
        writes.update(QueueItem, annotation.queue_item_id, status=QueueItem.Status.DONE, lease_expires_at=None)


def release(*, annotation: Annotation) -> None:
    """Give an unfinished task back to the queue, dropping its labels."""
    with transaction.atomic():
        item_id = annotation.queue_item_id
        if item_id is not None and is_leased(annotation):
            QueueItem.objects.filter(
                pk=item_id, leased_to=annotation.annotator_id, status=QueueItem.Status.LEASED
            ).update(status=QueueItem.Status.AVAILABLE, leased_to=None, lease_expires_at=None)
        Annotation.objects.in_progress().filter(pk=annotation.pk).delete()


def expire_leases(*, now: dt.datetime | None = None) -> int:
    """Put items whose lease lapsed back in the queue; their annotator can still take them back."""
    return _EXPIRE.execute(now=now or timezone.now())


def withdraw(*, solution: Solution) -> int:
    """Retire a solution's waiting ordinary items: gold and screening solutions are everyone's,
    served by their own rules and never leased as ordinary work."""
    return QueueItem.objects.filter(solution=solution, status=QueueItem.Status.AVAILABLE, generation__gte=0).update(
        status=QueueItem.Status.RETIRED
    )


def available_count(project=None) -> int:
    """Solutions of the project's ordinary work waiting for an annotator: each counted once,
    however many overlap slots it has open; gold and screening items, shown to everyone, not at
    all. What every page and the start line say is "ready to label"."""
    project = Project.objects.given(project)
    return (QueueItem.objects.filter(project=project, status=QueueItem.Status.AVAILABLE, generation__gte=0,
                                     is_quality_control=False, is_initial_screening=False)
            .values("solution_id").distinct().count())
