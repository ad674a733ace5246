"""Background jobs whose state lives in the database, so pages can poll progress.

Every kind of job (import, export, rescore, training run) changes state only through the
guarded methods below: `start` claims a pending job, `succeed`, `fail` and `cancel` end an
active one, each an UPDATE that matches only the state it leaves, so a redelivered task or a
second worker can never run a finished job again or end a job twice.

The row also says who holds a running job: `claimed_by` names the worker process
("host:pid") and `heartbeat_at` is refreshed by that process while it works (a thread in
it, see `hold`). A running job is taken over only once its holder is gone (its heartbeat
is stale, or its process is dead on this host), so a job never runs twice at once, and the
reconciler (`annotate.pool.recovery`) can tell a job whose worker died from one that is busy.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar, TypeVar

from celery import current_app
from django.conf import settings
from django.db import DatabaseError, connection, models
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)
# What sending a task raises while the broker is unreachable: kombu's error for a connection it
# gave up on (Celery retries a publish a few times first), and the transport's own.
BROKER_UNREACHABLE = (KombuOperationalError, RedisError, OSError)


class JobState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_STATES = (JobState.PENDING, JobState.RUNNING)
FINISHED_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


def this_worker() -> str:
    """The holder name written into `claimed_by`: this process, on this host."""
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_is_dead(claimed_by: str) -> bool:
    """True when the holder is a process on this host that no longer exists.

    A holder on another host cannot be checked from here: only its heartbeat tells.
    """
    host, _, pid = claimed_by.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's
        return False
    return _is_zombie(int(pid))


def _is_zombie(pid: int) -> bool:
    """A killed process not yet reaped still answers signal 0; its /proc state says Z (Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state follows the command name, which is in parentheses and may itself hold spaces.
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def holder_gone(claimed_by: str, heartbeat_at: dt.datetime | None) -> bool:
    """Whether the holder of a claim (a running job, a rescore chunk) stopped working on it."""
    if claimed_by == this_worker():
        return True  # this process's own earlier attempt (it ended without finishing)
    return heartbeat_at is None or heartbeat_at < stale_before() or holder_is_dead(claimed_by)


def stale_before() -> dt.datetime:
    """Heartbeats older than this mean the holder stopped working (killed, hung, lost)."""
    return timezone.now() - dt.timedelta(seconds=settings.STEPWISE_JOB_STALE_SECONDS)


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


class Job(models.Model):
    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.PENDING, db_index=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Who runs it now ("host:pid") and when that process last said it is alive.
    claimed_by = models.CharField(max_length=200, blank=True, editable=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True, editable=False)
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

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else (100 if self.state == JobState.SUCCEEDED else 0)

    def _rows(self) -> models.QuerySet:
        return type(self)._default_manager.filter(pk=self.pk)

    def start(self, **fields) -> bool:
        """Claim the job for this process (pending -> running, setting `fields` too).

        True when this attempt should do the work: it claimed the pending job, or took over
        a running one whose holder is gone (heartbeat stale, process dead) and whose kind is
        resumable. False for a finished job and for one another live worker holds.
        """
        claim = {"claimed_by": this_worker(), "heartbeat_at": timezone.now()}
        if self._rows().filter(state=JobState.PENDING).update(state=JobState.RUNNING, error="", **claim, **fields) == 1:
            self._claimed({"state": JobState.RUNNING, "error": "", **claim, **fields})
            return True
        self.refresh_from_db()
        if self.state != JobState.RUNNING or not self.resumable or not self.holder_gone():
            return False
        # Compare and swap on the old holder: of two attempts taking over, one wins.
        taken = self._rows().filter(
            state=JobState.RUNNING, claimed_by=self.claimed_by, heartbeat_at=self.heartbeat_at
        ).update(**claim, **fields)  # a resumed attempt starts its progress afresh, as a claimed one does
        if taken != 1:
            return False
        self._claimed({**claim, **fields})
        return True

    def holder_gone(self) -> bool:
        """Whether the process that claimed this running job stopped working on it."""
        return holder_gone(self.claimed_by, self.heartbeat_at)

    def take_turn(self) -> bool:
        """Hold a running job for one piece of its work (a rescore chunk); False if it ended."""
        claim = {"claimed_by": this_worker(), "heartbeat_at": timezone.now()}
        if self._rows().filter(state=JobState.RUNNING).update(**claim) != 1:
            return False
        self._claimed(claim)
        return True

    def _claimed(self, fields: dict) -> None:
        for name, value in fields.items():
            setattr(self, name, value)
        heartbeats.hold(self)

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
        row, and the reconciler (annotate.pool.recovery, on beat and at each worker's start) sends
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


class Heartbeats:
    """The jobs this process holds, beaten by one daemon thread every few seconds.

    The thread has its own database connection, closed after each beat. A task that ends
    without finishing its job (celery's task_postrun calls `release_all`) stops beating it,
    so a job whose worker is gone is told apart within STEPWISE_JOB_STALE_SECONDS.
    """

    def __init__(self) -> None:
        self._held: dict[tuple[type[models.Model], int], None] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def hold(self, job: models.Model) -> None:
        """Beat this row while held: a Job, or any row with state, claimed_by and heartbeat_at
        (a rescore chunk)."""
        with self._lock:
            self._held[(type(job), job.pk)] = None
            if self._thread is None or self._pid != os.getpid():  # none yet, or forked
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._beat_forever, name="job-heartbeat", daemon=True)
                self._thread.start()

    def release(self, job: models.Model) -> None:
        with self._lock:
            self._held.pop((type(job), job.pk), None)

    def release_all(self) -> None:
        with self._lock:
            self._held.clear()

    def held(self) -> list[tuple[type[models.Model], int]]:
        with self._lock:
            return list(self._held)

    def beat(self) -> None:
        me, now = this_worker(), timezone.now()
        for model, pk in self.held():
            model._default_manager.filter(pk=pk, state=JobState.RUNNING, claimed_by=me).update(heartbeat_at=now)

    def _beat_forever(self) -> None:
        pid = os.getpid()
        while pid == os.getpid() and threading.main_thread().is_alive():
            threading.Event().wait(settings.STEPWISE_JOB_HEARTBEAT_SECONDS)
            if not self.held():
                continue
            try:
                self.beat()
            except DatabaseError as error:  # the database is away: the next beat tries again
                logger.warning("job heartbeat failed: %s", error)
            finally:
                connection.close()


heartbeats = Heartbeats()


class ImportJob(Job):
    path = models.CharField(max_length=500)
    original_name = models.CharField(max_length=300, blank=True)
    format = models.CharField(max_length=20, default="auto")
    split_mode = models.CharField(max_length=20, default="auto")  # steps.splitting.SPLIT_MODES
    source = models.CharField(max_length=100, blank=True)
    atomic = models.BooleanField(default=False)
    report_path = models.CharField(max_length=500, blank=True)
    created = models.PositiveIntegerField(default=0)
    duplicates = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    # The new solutions as graded on import, and how many of them went into the queue.
    graded_right = models.PositiveIntegerField(default=0)
    graded_wrong = models.PositiveIntegerField(default=0)
    graded_unknown = models.PositiveIntegerField(default=0)
    queued = models.PositiveIntegerField(default=0)

    progress_unit = "lines"
    task_name = "annotate.import_pool_task"

    def __str__(self) -> str:
        return f"Import {self.pk} of {self.original_name or self.path}"


class ExportJob(Job):
    format = models.CharField(max_length=30, default="prm800k")
    options = models.JSONField(default=dict, blank=True)
    path = models.CharField(max_length=500, blank=True)
    lines = models.PositiveIntegerField(default=0)
    # What the export left out, by reason ({"give_up": 3, "unknown_grade": 1}): its summary.
    skipped = models.JSONField(default=dict, blank=True)
    # What it says of the lines it wrote: {"total_time": {"active": 40, "claim_to_submit": 2}}
    # (PRM800K: where each line's total_time came from, annotate.pool.prm800k.total_time).
    report = models.JSONField(default=dict, blank=True)

    task_name = "annotate.export_task"
    # What each format's progress counts ("annotations", or "solutions" for a format with a row per
    # solution): filled by the export format registry (annotate.pool.exporting.formats), above the models.
    units_by_format: ClassVar[dict[str, str]] = {}

    def __str__(self) -> str:
        return f"Export {self.pk} ({self.format})"

    @property
    def progress_unit(self) -> str:  # type: ignore[override]
        return self.units_by_format.get(self.format, "annotations")
