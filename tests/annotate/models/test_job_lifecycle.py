"""The one job lifecycle: who holds a running job, when it may be taken over, cancel, requeue."""
import datetime as dt
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.utils import timezone

from annotate.models import ExportJob, ImportJob, Step
from annotate.models.jobs import JobState, holder_is_dead, this_worker
from annotate.pool import recovery
from tests.annotate.models.test_recovery import lose_broker_messages
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db

ALIVE = f"{socket.gethostname()}:{os.getppid()}"  # a live process on this host, not this one
DEAD = f"{socket.gethostname()}:999999999"  # no such process


@pytest.fixture(autouse=True)
def nothing_left_behind():
    yield
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


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_database_restart_in_the_middle_of_an_import_batch_reports_no_good_line_and_the_retry_completes(
    tmp_path, monkeypatch
):
    """The server ends the import's connection after the batch's solutions are written and before
    its steps are, and refuses the next connection (it is restarting): the job goes back to
    pending, no line is reported as an error for it, and the task's retry imports every good line
    (the one bad line still reported as itself)."""
    import json

    import psycopg
    from django.db import OperationalError, connection

    from annotate.pool import importing
    from annotate.pool.importing import writing
    from tests.infra.test_postgresql_backend import other_connection

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    lines = [{"problem": f"What is {n} + {n}?", "ground_truth_answer": str(2 * n), "steps": [f"{n} + {n} = {2 * n}."]}
             for n in range(1, 6)]
    lines.insert(2, {"problem": "No answer to grade by.", "steps": ["x"]})
    path = tmp_path / "pool.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    job = importing.create_import_job(path=path)
    insert_rows, connect, restarts = writing.insert_rows, connection.get_new_connection, []

    def refused_once(params):
        monkeypatch.setattr(connection, "get_new_connection", connect)
        raise psycopg.OperationalError("connection refused: the database system is starting up")

    def restart_before_the_steps(model, columns, rows):
        if model.__name__ == "Step" and not restarts:
            pid = connection.connection.info.backend_pid
            with other_connection() as other:
                other.execute("SELECT pg_terminate_backend(%s)", [pid])
                while other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
                    time.sleep(0.05)
            restarts.append(pid)
            monkeypatch.setattr(connection, "get_new_connection", refused_once)
        return insert_rows(model, columns, rows)

    monkeypatch.setattr(writing, "insert_rows", restart_before_the_steps)
    with pytest.raises(OperationalError):  # what the task's autoretry_for sees
        importing.run_import_job(job_id=job.pk)
    job.refresh_from_db()  # on a new connection
    assert restarts and connection.get_new_connection == connect  # the refusal was met
    assert (job.state, job.error, job.errors) == (JobState.PENDING, "", 0)
    assert not Path(job.report_path).exists()  # nothing reported, least of all good lines as errors

    job = importing.run_import_job(job_id=job.pk)  # the retry
    assert job.state == JobState.SUCCEEDED, job.error
    report = [json.loads(line) for line in Path(job.report_path).read_text().splitlines()]
    assert [entry["status"] for entry in report] == ["created"] * 2 + ["error"] + ["created"] * 3
    assert report[2]["error"] == "field 'ground_truth_answer': is missing"
    assert (job.created, job.errors) == (5, 1)
    assert Step.objects.count() == 5
