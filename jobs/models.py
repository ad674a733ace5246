"""Background jobs whose state lives in the database, so pages can poll progress.

Every kind of job (import, export, rescore, training run, ...) changes state only through the
guarded methods below: `start` claims a pending job, `succeed`, `fail` and `cancel` end an
active one, each an UPDATE that matches only the state it leaves, so a redelivered task or a
second worker can never run a finished job again or end a job twice.

A row also says who holds it while it runs (`Held`: a job, or a chunk of one): `claimed_by`
names the worker process ("host:pid") and `heartbeat_at` is refreshed by that process while it
works (`jobs.holders.heartbeats`). A running row is taken over only once its holder is gone,
so it never runs twice at once, and the reconciler (`jobs.recovery`) can tell a job whose
worker died from one that is busy.

Each concrete job kind registers itself when its class is defined (`Job.__init_subclass__`);
`job_kinds()` is what the reconciler walks, so no app names another's job kinds.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, TypeVar

from celery import current_app
from django.conf import settings
from django.db import DatabaseError, connection, models
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import RedisError

from jobs.holders import heartbeats, holder_gone, holder_is_dead, stale_before, this_worker
from jobs.states import ACTIVE_STATES, FINISHED_STATES, JobState

logger = logging.getLogger(__name__)
# What sending a task raises while the broker is unreachable: kombu's error for a connection it
# gave up on (Celery retries a publish a few times first), and the transport's own.
BROKER_UNREACHABLE = (KombuOperationalError, RedisError, OSError)


def claim(rows: models.QuerySet, *, to: str, **fields: Any) -> bool:
    """Move the pending row of `rows` to state `to` (setting `fields` too) with one guarded UPDATE.

    True when exactly one row changed: of several claimants one wins, on SQLite and PostgreSQL
    alike (a claimant that waited for the row's lock finds it no longer pending). Jobs and
    rescore chunks claim with it (pending -> running), a generation chunk too (pending -> done,
    in the transaction that writes its solutions).
    """
    return rows.filter(state=JobState.PENDING).update(state=to, **fields) == 1


class Held(models.Model):
    """A row a worker process holds while it works on it: a job, or a chunk of one.

    Its `state` (each kind declares its own column) says pending and running in `JobState`'s words.
    """

    # Who runs it now ("host:pid") and when that process last said it is alive.
    claimed_by = models.CharField(max_length=200, blank=True, editable=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True, editable=False)

    state: str

    class Meta:
        abstract = True

    def _rows(self) -> models.QuerySet:
        return type(self)._default_manager.filter(pk=self.pk)

    def holder_gone(self) -> bool:
        """Whether the process that claimed this running row stopped working on it."""
        return holder_gone(self.claimed_by, self.heartbeat_at)

    def claim(self, *, take_over: bool = True, **fields: Any) -> bool:
        """Claim the row for this process (pending -> running, setting `fields` too), or take
        over a running one whose holder is gone (heartbeat stale, process dead) when `take_over`.

        One guarded UPDATE each, so of two workers handed the same row exactly one gets it; the
        claim is then beaten by this process's heartbeat thread. False for a row that is neither.
        """
        held = {"claimed_by": this_worker(), "heartbeat_at": timezone.now()}
        if claim(self._rows(), to=JobState.RUNNING, **held, **fields):
            self._claimed({"state": JobState.RUNNING, **held, **fields})
            return True
        self.refresh_from_db()
        if self.state != JobState.RUNNING or not take_over or not self.holder_gone():
            return False
        # Compare and swap on the old holder: of two attempts taking over, one wins.
        taken = self._rows().filter(
            state=JobState.RUNNING, claimed_by=self.claimed_by, heartbeat_at=self.heartbeat_at
        ).update(**held, **fields)  # a resumed attempt starts its progress afresh, as a claimed one does
        if taken != 1:
            return False
        self._claimed({**held, **fields})
        return True

    def _claimed(self, fields: dict) -> None:
        for name, value in fields.items():
            setattr(self, name, value)
        heartbeats.hold(self)


_J = TypeVar("_J", bound="Job")


class JobQuerySet(models.QuerySet[_J]):
    def active(self) -> JobQuerySet[_J]:
        return self.filter(state__in=ACTIVE_STATES)

    def running_without_holder(self) -> list[_J]:
        """Running jobs whose holder is gone: heartbeat stale or missing, or its process dead."""
        running = self.filter(state=JobState.RUNNING)
        stale = running.filter(models.Q(heartbeat_at__isnull=True) | models.Q(heartbeat_at__lt=stale_before()))
        dead = [job for job in running.exclude(pk__in=stale.values("pk")) if holder_is_dead(job.claimed_by)]
        return [*stale, *dead]


# Every Job subclass, by "module.Class", as it is defined: the registry `job_kinds()` reads.
_kinds: dict[str, type[Job]] = {}


def job_kinds() -> list[type[Job]]:
    """The concrete job kinds defined so far (Django defines each app's when it loads its
    models), those with a task to send: what the reconciler walks."""
    return [kind for kind in _kinds.values()
            if hasattr(kind, "_meta") and not kind._meta.abstract and not kind._meta.proxy and kind.task_name]


class Job(Held):
    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.PENDING, db_index=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # When its task message was last sent (null: at creation): the reconciler resends
    # the message of a job pending for long, in case the broker lost it.
    enqueued_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = JobQuerySet.as_manager()

    # Whether a redelivered task may pick up a job an earlier attempt left running: true
    # where the work is idempotent (keyed writes, a file rewritten whole).
    resumable: ClassVar[bool] = True
    # Columns set in the same UPDATE as the final state (a training run frees its lock).
    finished_updates: ClassVar[dict] = {}
    # What `done` and `total` count, for the progress partial.
    progress_unit: ClassVar[str] = "items"
    # The Celery task (by name) that runs the job from its id; the reconciler resends it.
    task_name: ClassVar[str] = ""

    class Meta(Held.Meta):
        abstract = True
        ordering = ["-created_at"]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _kinds[f"{cls.__module__}.{cls.__qualname__}"] = cls  # abstract or not: Django says which later

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else (100 if self.state == JobState.SUCCEEDED else 0)

    @property
    def waiting_line(self) -> str:
        """What this job waits behind while pending, in words (jobs.queues)."""
        from jobs.queues import waiting_line  # it reads the kinds this module registers

        return waiting_line(self)

    def start(self, **fields: Any) -> bool:
        """Claim the job for this process (pending -> running, setting `fields` too).

        True when this attempt should do the work: it claimed the pending job, or took over
        a running one whose holder is gone (heartbeat stale, process dead) and whose kind is
        resumable. False for a finished job and for one another live worker holds.
        """
        return self.claim(take_over=self.resumable, error="", **fields)

    def take_turn(self) -> bool:
        """Hold a running job for one piece of its work (a rescore chunk); False if it ended."""
        claim = {"claimed_by": this_worker(), "heartbeat_at": timezone.now()}
        if self._rows().filter(state=JobState.RUNNING).update(**claim) != 1:
            return False
        self._claimed(claim)
        return True

    def requeue(self) -> bool:
        """Put a running job whose holder is gone back to pending, to start over; for kinds that
        cannot resume (a training run). Guarded on the old holder, like a takeover."""
        updated = self._rows().filter(
            state=JobState.RUNNING, claimed_by=self.claimed_by, heartbeat_at=self.heartbeat_at
        ).update(state=JobState.PENDING, claimed_by="", heartbeat_at=None, done=0)
        return updated == 1

    def mark_enqueued(self) -> None:
        self._rows().update(enqueued_at=timezone.now())

    def send_task(self) -> None:
        """Send this job's task (`task_name`, with the job's id); a new job's creator calls it
        on commit (`transaction.on_commit(job.send_task)`), so no worker reads a row not yet there.

        By name, so the stage that records a job never imports the tasks modules (which import
        every stage); the task's route and options still apply (a signature finds the task when
        this process has registered it, and sends its name otherwise).

        A broker that cannot be reached (Redis away) fails nothing: the job stays pending in its
        row, and the reconciler (jobs.recovery, on beat and at each worker's start) sends
        its task once the broker is back, as it does for a message the broker lost.
        """
        try:
            # No result to wait for (the row is the job's state): nothing subscribes to one either.
            current_app.signature(self.task_name, args=(self.pk,)).apply_async(ignore_result=True)
        except BROKER_UNREACHABLE as error:
            logger.warning("%s %s: its task waits for the broker (%s: %s); the reconciler sends it again",
                           type(self).__name__, self.pk, type(error).__name__, error)

    def succeed(self, **fields) -> bool:
        """End an active job as succeeded; False if it had already ended."""
        return self._finish(JobState.SUCCEEDED, **fields)

    def fail(self, error: str, **fields) -> bool:
        """End an active job as failed with its message; False if it had already ended."""
        return self._finish(JobState.FAILED, error=error[:5000], **fields)

    def cancel(self, reason: str = "cancelled") -> bool:
        """End an active job as cancelled; its worker stops at its next check of the state."""
        return self._finish(JobState.CANCELLED, error=reason)

    def _finish(self, state: str, **fields) -> bool:
        updates = {"state": state, "finished_at": timezone.now(), **self.finished_updates, **fields}
        heartbeats.release(self)
        if self._rows().filter(state__in=ACTIVE_STATES).update(**updates) != 1:
            return False
        for name, value in updates.items():
            setattr(self, name, value)
        return True

    def release(self) -> bool:
        """Give a running job back (running -> pending) so that a retry starts it again: the
        work stopped for a reason outside the job (its database connection was lost)."""
        heartbeats.release(self)
        updated = self._rows().filter(state=JobState.RUNNING, claimed_by=this_worker()).update(
            state=JobState.PENDING, claimed_by="", heartbeat_at=None
        )
        return updated == 1

    def record_progress(self, **fields) -> None:
        """Progress columns (done, total, counts) of a running job; ignored once it ended.

        Progress is also a heartbeat."""
        self._rows().filter(state=JobState.RUNNING).update(heartbeat_at=timezone.now(), **fields)

    @contextmanager
    def failure_recorded(self) -> Iterator[Job]:
        """The job's work: an exception anywhere in it ends the job failed, with its message.

        A lost database connection is no fault of the job: the job goes back to pending on a
        fresh connection and the exception propagates, for the task to retry it.
        """
        try:
            yield self
        except Exception as error:
            if isinstance(error, DatabaseError) and not connection.is_usable():
                connection.close()  # the next query opens a new connection
                if self.release():
                    raise
            self.fail(f"{type(error).__name__}: {error}")
            raise
