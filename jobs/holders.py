"""Who holds a claim (a running job, a rescore chunk) and whether that holder is still at work.

A claim names its holder in `claimed_by` ("host:pid") and the holder refreshes `heartbeat_at`
from a thread while it works (`heartbeats`). A claim is taken over only once its holder is gone:
its heartbeat is stale, or its process is dead on this host.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection, models
from django.utils import timezone

from jobs.states import JobState

logger = logging.getLogger(__name__)


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


class Heartbeats:
    """The claims this process holds, beaten by one daemon thread every few seconds.

    The thread has its own database connection, closed after each beat. A task that ends
    without finishing its job (celery's task_postrun calls `release_all`) stops beating it,
    so a job whose worker is gone is told apart within STEPWISE_JOB_STALE_SECONDS.
    """

    def __init__(self) -> None:
        self._held: dict[tuple[type[models.Model], int], None] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def hold(self, row: models.Model) -> None:
        """Beat this row while held: any row with state, claimed_by and heartbeat_at (`jobs.models.Held`)."""
        with self._lock:
            self._held[(type(row), row.pk)] = None
            if self._thread is None or self._pid != os.getpid():  # none yet, or forked
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._beat_forever, name="job-heartbeat", daemon=True)
                self._thread.start()

    def release(self, row: models.Model) -> None:
        with self._lock:
            self._held.pop((type(row), row.pk), None)

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
