"""The one job lifecycle: who holds a running job, when it may be taken over, cancel, requeue."""
import datetime as dt
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import timezone

from annotate.models import ExportJob, ImportJob
from annotate.models.jobs import JobState, heartbeats, holder_is_dead, this_worker
from annotate.pool import recovery
from tests.conftest import wait_for
from tests.test_recovery import lose_broker_messages

pytestmark = pytest.mark.django_db

ALIVE = f"{socket.gethostname()}:{os.getppid()}"  # a live process on this host, not this one
DEAD = f"{socket.gethostname()}:999999999"  # no such process


@pytest.fixture(autouse=True)
def nothing_left_behind():
    yield
    heartbeats.release_all()
    lose_broker_messages()  # the reconciler's messages: no worker here to run them


def running(job, *, holder: str, beat_seconds_ago: float = 0) -> None:
    type(job).objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, claimed_by=holder, heartbeat_at=timezone.now() - dt.timedelta(seconds=beat_seconds_ago)
    )


def test_starting_a_pending_job_records_this_process_as_its_holder(tmp_path):
    job = ImportJob.objects.create(path=str(tmp_path / "x.jsonl"))
    assert job.start()
    job.refresh_from_db()
    assert (job.state, job.claimed_by) == (JobState.RUNNING, this_worker())
    assert timezone.now() - job.heartbeat_at < dt.timedelta(seconds=5)


def test_a_running_job_is_taken_over_only_once_its_holder_is_gone(tmp_path, settings):
    settings.STEPWISE_JOB_STALE_SECONDS = 30
    job = ImportJob.objects.create(path=str(tmp_path / "x.jsonl"))
    running(job, holder=ALIVE, beat_seconds_ago=5)
    assert not ImportJob.objects.get(pk=job.pk).start()  # alive and beating: never twice at once
    running(job, holder=ALIVE, beat_seconds_ago=60)
    assert ImportJob.objects.get(pk=job.pk).start()  # silent for too long
    running(job, holder=DEAD, beat_seconds_ago=1)
    taken = ImportJob.objects.get(pk=job.pk)
    assert taken.start() and ImportJob.objects.get(pk=job.pk).claimed_by == this_worker()  # dead at once


def test_a_cancelled_job_cannot_succeed_or_fail_afterwards(tmp_path):
    job = ExportJob.objects.create()
    assert job.start() and job.cancel("cancelled by boss")
    assert not job.succeed() and not job.fail("late")
    job.refresh_from_db()
    assert (job.state, job.error, job.is_finished) == (JobState.CANCELLED, "cancelled by boss", True)


def test_the_reconciler_resends_pending_jobs_only_after_their_window(tmp_path):
    job = ImportJob.objects.create(path=str(tmp_path / "x.jsonl"))
    assert recovery.reconcile(pending_after=120) == []  # just sent: give the message its time
    assert recovery.reconcile(pending_after=0) == [f"ImportJob:{job.pk}"]
    assert recovery.reconcile(pending_after=120) == []  # resent just now: once per window


def test_a_training_run_whose_worker_died_starts_over_from_pending():
    from scoring.models import TrainingRun

    run = TrainingRun.objects.create()
    running(run, holder=DEAD)
    TrainingRun.objects.filter(pk=run.pk).update(done=7, created_at=timezone.now() - dt.timedelta(minutes=5))
    assert recovery.reconcile(pending_after=60) == [f"TrainingRun:{run.pk}"]
    run.refresh_from_db()
    assert (run.state, run.claimed_by, run.done, run.active_slot) == (JobState.PENDING, "", 0, 1)


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_lost_database_connection_gives_the_job_back_for_its_task_to_retry(tmp_path):
    from django.db import OperationalError, connection

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    job = ImportJob.objects.create(path=str(tmp_path / "x.jsonl"))
    assert job.start()
    with pytest.raises(OperationalError), job.failure_recorded():
        connection.connection.close()  # what pg_terminate_backend leaves behind
        raise OperationalError("server closed the connection unexpectedly")
    job.refresh_from_db()  # on a new connection
    assert (job.state, job.claimed_by, job.error) == (JobState.PENDING, "", "")

    assert job.start()
    with pytest.raises(ValueError), job.failure_recorded():  # a fault of the job itself still fails it
        raise ValueError("line 3: no steps")
    job.refresh_from_db()
    assert (job.state, job.error) == (JobState.FAILED, "ValueError: line 3: no steps")


def test_a_holder_that_exited_but_was_not_yet_reaped_counts_as_dead():
    # A worker killed with -9 leaves its pool process a zombie until someone reaps it (some
    # init processes take their time); signal 0 still reaches a zombie, so /proc must decide.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    holder = f"{socket.gethostname()}:{child.pid}"
    wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z", timeout=20)
    assert holder_is_dead(holder)
    child.wait()  # reaped: gone altogether
    assert holder_is_dead(holder)
    assert not holder_is_dead(f"{socket.gethostname()}:{os.getpid()}")
