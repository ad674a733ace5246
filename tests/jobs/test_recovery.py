"""Recovery with real worker processes: a lost broker, a worker killed with -9, two schedulers.

Each job kind (import, export, rescore, training run) must finish, exactly once, when the
broker forgets its messages (a flushed Redis database; on the embedded default, a deleted
queue folder) or its worker dies mid-work, with nobody running a manual step: the
reconciler (jobs/recovery.py) runs when a worker starts and on beat.
"""
import datetime as dt
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from annotate.models import ExportJob, ImportJob, Project, Solution, Step
from annotate.pool.exporting import ExportOptions, create_export_job
from annotate.pool.importing import create_import_job
from annotate.tasks import reconcile_jobs_task
from bench.tiny import build_tiny_prm
from jobs import recovery
from jobs.states import FINISHED_STATES, JobState
from scoring.learning import retraining
from scoring.models import ModelVersion, RescoreJob, SolutionScore, StepScore, TrainingRun
from scoring.rescoring import rescore as scoring
from scoring.store import registry
from tests.conftest import WorkerProcess, wait_for
from tests.scoring.test_tasks import make_pool

ALIVE = f"{socket.gethostname()}:{os.getppid()}"  # a live process on this host, not this one
DEAD = f"{socket.gethostname()}:999999999"  # no such process


def running(job, *, holder: str, beat_seconds_ago: float = 0) -> None:
    type(job).objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, claimed_by=holder, heartbeat_at=timezone.now() - dt.timedelta(seconds=beat_seconds_ago)
    )


FAST_TRAINING = {"train": {"epochs": 2, "val_fraction": 0.25}, "bon_max_problems": 2}


def lose_broker_messages() -> None:
    """What a Redis restart (no persistence here) or a wiped broker folder does to the queue."""
    if settings.CELERY_BROKER_URL.startswith("redis"):
        import redis

        redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    else:
        for name in ("queue", "processed"):
            shutil.rmtree(settings.BROKER_DIR / name, ignore_errors=True)
            (settings.BROKER_DIR / name).mkdir(parents=True)


def write_pool_file(path: Path, n: int, offset: int = 0) -> Path:
    lines = [{"problem": f"What is {n} + {offset + k}?", "ground_truth_answer": str(n + offset + k),
              "steps": [f"{n} + {offset + k} = {n + offset + k}.", f"# Answer\n\n{n + offset + k}"]}
             for k in range(n)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def finished(model, pk: int) -> bool:
    return model.objects.get(pk=pk).state in FINISHED_STATES


@pytest.fixture
def tiny_current(transactional_db, tmp_path):
    registry.forget_loaded()
    return registry.register_model_version(name="tiny", path=build_tiny_prm(tmp_path / "tiny"), make_current=True)


@pytest.fixture
def worker_factory(transactional_db, tmp_path, monkeypatch):
    """Real workers with small chunks and quick heartbeats; all are stopped at the end."""
    monkeypatch.setenv("STEPWISE_RESCORE_CHUNK_SIZE", "4")
    monkeypatch.setenv("STEPWISE_JOB_HEARTBEAT_SECONDS", "0.5")
    monkeypatch.setenv("STEPWISE_JOB_STALE_SECONDS", "3")
    workers = []
    lose_broker_messages()  # no leftovers from earlier tests

    def start(**env: str) -> WorkerProcess:  # env: on top of the test's (a private database or broker)
        worker = WorkerProcess(tmp_path / f"worker-{len(workers)}.log", env=env)
        workers.append(worker)
        worker.start()
        return worker

    yield start
    for worker in workers:
        worker.stop()
    lose_broker_messages()  # killed workers leave messages the next test must not get


@pytest.mark.embedded
def test_every_kind_of_queued_job_survives_a_lost_broker(tiny_current, worker_factory, tmp_path):
    make_pool(12)
    imported = create_import_job(path=write_pool_file(tmp_path / "pool.jsonl", 6), original_name="pool.jsonl")
    export = create_export_job(format="prm800k", options=ExportOptions())
    rescore = scoring.start_rescore(model_version=tiny_current, rebuild_queue=False)
    training = retraining.start_training_run(options=FAST_TRAINING)
    lose_broker_messages()  # every message above is gone; only the rows know

    worker_factory()  # its start reconciles: each job's task is sent again
    jobs = [(ImportJob, imported.pk), (ExportJob, export.pk), (RescoreJob, rescore.pk), (TrainingRun, training.pk)]
    wait_for(lambda: all(finished(model, pk) for model, pk in jobs), timeout=240)

    imported.refresh_from_db()
    assert (imported.state, imported.created) == (JobState.SUCCEEDED, 6), imported.error
    assert Solution.objects.count() == 12 + 6
    assert ExportJob.objects.get(pk=export.pk).state == JobState.SUCCEEDED
    rescore.refresh_from_db()
    assert rescore.state == JobState.SUCCEEDED, rescore.error
    # The rescore saw the pool as it was when it was planned; each solution scored once.
    assert SolutionScore.objects.filter(model_version=tiny_current).count() == rescore.total >= 12
    assert StepScore.objects.filter(model_version=tiny_current).count() == Step.objects.filter(
        solution__scores__model_version=tiny_current).count()
    # Without labels the run has nothing to learn from: it ends (failed, saying why), once.
    training = TrainingRun.objects.get(pk=training.pk)
    assert training.state in FINISHED_STATES and training.active_slot is None
    assert ModelVersion.objects.count() == 1 and TrainingRun.objects.count() == 1


@pytest.mark.embedded
def test_a_broker_lost_mid_rescore_and_import_is_recovered_by_the_beat_reconciler(tiny_current, worker_factory,
                                                                                  tmp_path):
    make_pool(80)
    worker_factory()
    rescore = scoring.start_rescore(model_version=tiny_current, rebuild_queue=False)
    wait_for(lambda: RescoreJob.objects.get(pk=rescore.pk).chunks_done >= 1, timeout=120, interval=0.05)
    imported = create_import_job(path=write_pool_file(tmp_path / "more.jsonl", 5, offset=100))
    lose_broker_messages()  # the rescore's queued chunks and the import's message are gone
    assert not finished(RescoreJob, rescore.pk)

    # Beat sends the reconciler every 30 s; here every second, until everything is done.
    deadline = time.monotonic() + 180
    while not (finished(RescoreJob, rescore.pk) and finished(ImportJob, imported.pk)):
        assert time.monotonic() < deadline, "jobs not recovered"
        reconcile_jobs_task.delay(pending_after=0)
        time.sleep(1)

    rescore.refresh_from_db()
    assert rescore.state == JobState.SUCCEEDED and rescore.chunks_done == rescore.chunks_total == 20, rescore.error
    assert SolutionScore.objects.filter(model_version=tiny_current).count() == 80
    assert StepScore.objects.filter(model_version=tiny_current).count() == 80 * 8
    imported.refresh_from_db()
    assert (imported.state, imported.created) == (JobState.SUCCEEDED, 5)
    assert Solution.objects.count() == 85


@pytest.mark.embedded
def test_a_worker_killed_mid_chunk_has_its_job_resumed_within_a_minute_of_the_restart(tiny_current, worker_factory):
    make_pool(120)
    worker = worker_factory()
    job = scoring.start_rescore(model_version=tiny_current)
    wait_for(lambda: RescoreJob.objects.get(pk=job.pk).chunks_done >= 1, timeout=120, interval=0.05)
    worker.kill()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.chunks_done < job.chunks_total, "job ended before the kill"
    done_at_kill = job.chunks_done

    restarted = time.monotonic()
    worker_factory()  # no beat, no manual step: the worker's start finds the dead holder
    wait_for(lambda: RescoreJob.objects.get(pk=job.pk).chunks_done > done_at_kill, timeout=60, interval=0.1)
    assert time.monotonic() - restarted < 60
    wait_for(lambda: finished(RescoreJob, job.pk), timeout=180)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    assert job.chunks_done == job.chunks_total == 30
    assert SolutionScore.objects.filter(model_version=tiny_current).count() == 120
    assert StepScore.objects.filter(model_version=tiny_current).count() == Step.objects.count() == 120 * 8


@pytest.mark.embedded
def test_a_worker_killed_mid_import_leaves_each_line_imported_once(worker_factory, tmp_path):
    worker = worker_factory()
    job = create_import_job(path=write_pool_file(tmp_path / "big.jsonl", 3000))
    wait_for(lambda: ImportJob.objects.get(pk=job.pk).done > 0, timeout=120, interval=0.05)
    worker.kill()
    assert not finished(ImportJob, job.pk), "import ended before the kill"

    worker_factory()
    wait_for(lambda: finished(ImportJob, job.pk), timeout=180)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    # The resumed run finds by content hash what the killed one wrote: nothing twice.
    assert job.created + job.duplicates == 3000 and job.errors == 0
    assert Solution.objects.count() == 3000


@pytest.mark.django_db
def test_the_reconciler_resends_pending_jobs_only_after_their_window(tmp_path):
    job = ImportJob.objects.create(path=str(tmp_path / "x.jsonl"))
    assert recovery.reconcile(pending_after=120) == []  # just sent: give the message its time
    assert recovery.reconcile(pending_after=0) == [f"ImportJob:{job.pk}"]
    assert recovery.reconcile(pending_after=120) == []  # resent just now: once per window
    lose_broker_messages()  # the reconciler's message: no worker here to run it


@pytest.mark.django_db
def test_a_training_run_whose_worker_died_starts_over_from_pending():
    from scoring.models import TrainingRun

    run = TrainingRun.objects.create()
    running(run, holder=DEAD)
    TrainingRun.objects.filter(pk=run.pk).update(done=7, created_at=timezone.now() - dt.timedelta(minutes=5))
    assert recovery.reconcile(pending_after=60) == [f"TrainingRun:{run.pk}"]
    run.refresh_from_db()
    assert (run.state, run.claimed_by, run.done, run.active_slot) == (JobState.PENDING, "", 0, 1)
    lose_broker_messages()


def test_the_reconciler_leaves_a_job_alone_while_its_holder_is_alive(transactional_db, tmp_path):
    import os
    import socket

    from django.utils import timezone

    job = ImportJob.objects.create(path=str(tmp_path / "none.jsonl"))
    alive = f"{socket.gethostname()}:{os.getppid()}"  # another process on this host, alive
    ImportJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING, claimed_by=alive, heartbeat_at=timezone.now())
    assert recovery.reconcile(pending_after=0) == []
    assert not ImportJob.objects.get(pk=job.pk).start()  # a second attempt refuses it

    ImportJob.objects.filter(pk=job.pk).update(claimed_by=f"{socket.gethostname()}:999999999")  # died
    assert recovery.reconcile(pending_after=0) == [f"ImportJob:{job.pk}"]
    lose_broker_messages()


# --- the database goes away mid-job (PostgreSQL) --------------------------------------------------


def _on_backends(database: str, expression: str) -> list[tuple]:
    """`expression` of pg_stat_activity for every connection to `database`, from an admin connection."""
    import psycopg

    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as admin:
        return admin.execute(
            f"SELECT {expression} FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [database]
        ).fetchall()


def terminate_backends(database: str) -> int:
    """pg_terminate_backend on every connection to `database`, as a database restart would."""
    return len(_on_backends(database, "pg_terminate_backend(pid)"))


def worker_backends(database: str) -> set[int]:
    """The PostgreSQL backends serving `database` for anyone but this test process."""
    connection.close()  # ours is not counted: there is none while we look
    return {pid for (pid,) in _on_backends(database, "pid")}


@pytest.mark.postgresql
def test_a_worker_keeps_its_database_connection_from_task_to_task_and_replaces_a_killed_one(
        celery_worker_process):
    """Between two tasks a worker does what Django does between two requests: it keeps its
    connection (Celery's default opens a new PostgreSQL backend for every task), and one the
    database has killed meanwhile is replaced by the next task, which succeeds."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    database = settings.DATABASES["default"]["NAME"]
    assert reconcile_jobs_task.delay(0).get(timeout=60) == []
    held = worker_backends(database)
    assert reconcile_jobs_task.delay(0).get(timeout=60) == []
    assert worker_backends(database) == held and len(held) == 1

    assert terminate_backends(database) == 1
    assert reconcile_jobs_task.delay(0).get(timeout=60) == []
    replaced = worker_backends(database)
    assert len(replaced) == 1 and replaced != held


@pytest.mark.postgresql
def test_an_import_whose_database_connection_is_killed_resumes_and_the_app_answers_again(
    worker_factory, tmp_path, client, admin_user
):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    worker_factory()
    client.force_login(admin_user)
    job = create_import_job(path=write_pool_file(tmp_path / "big.jsonl", 3000))
    wait_for(lambda: ImportJob.objects.get(pk=job.pk).done > 0, timeout=120, interval=0.05)
    assert not finished(ImportJob, job.pk), "import ended before the kill"
    assert terminate_backends(settings.DATABASES["default"]["NAME"]) >= 2  # the worker's and ours

    started = time.monotonic()
    response = None
    while time.monotonic() - started < 15:
        try:
            response = client.get(f"/jobs/import/{job.pk}/")
            break
        except Exception:  # the test process's own connection was killed too
            connection.close()
            time.sleep(0.5)
    assert response is not None and response.status_code in (200, 302), "the app did not answer within 15 s"

    wait_for(lambda: finished(ImportJob, job.pk), timeout=180)
    job.refresh_from_db()
    # Either the batch's transaction reconnects (Django closes a connection whose rollback
    # fails, the line-by-line retry opens a new one) or the job is released and its task
    # retried; both end succeeded with every line imported once.
    assert job.state == JobState.SUCCEEDED and job.errors == 0, job.error
    assert job.created + job.duplicates == 3000
    assert Solution.objects.count() == 3000


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


# --- two schedulers -------------------------------------------------------------------------------


def test_two_beat_processes_firing_at_once_start_one_retrain(transactional_db, monkeypatch):
    from scoring.tasks import scheduled_retrain_task

    monkeypatch.setattr(retraining, "new_label_count", lambda project: 100)
    barrier = threading.Barrier(4)
    outcomes = []
    project = Project.objects.sole()

    def beat():
        try:
            barrier.wait()
            outcomes.append(scheduled_retrain_task(min_new_labels=1, options=FAST_TRAINING, project_id=project.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=beat) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lose_broker_messages()  # the winner's train message: no worker here to run it
    run = TrainingRun.objects.get()  # exactly one
    assert sorted(outcomes, key=str) == sorted([run.pk, None, None, None], key=str)
