"""Real faults under real jobs: a PostgreSQL server restarted mid-import, a worker killed with -9
mid-export, a Redis broker restarted mid-export and mid-training.

The servers that go down are this test's own: a PostgreSQL cluster (initdb, pg_ctl) and a
redis-server, each on a free port in a temporary folder, so the shared servers other tests use
never restart. The worker under test is a real `celery worker` process (tests/conftest.py) whose
DATABASE_URL or REDIS_URL points at the private server; the assertions read the rows it wrote.
docs/security.md ("Faults survived") lists what each test does and what held.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from django.db import connection

import tests.conftest
from annotate.models import ExportJob, ImportJob, LabelingConfig, SampleLine, Solution, Step
from annotate.pool import importing
from annotate.pool.exporting import ExportOptions, create_export_job
from annotate.pool.importing import create_import_job
from annotate.tasks import reconcile_jobs_task
from bench.loadtest import free_port
from jobs.states import FINISHED_STATES, JobState
from scoring.learning import retraining
from scoring.models import ModelVersion, TrainingRun
from tests.annotations import PHASE2_LINE
from tests.conftest import wait_for
from tests.factories import user_with_role
from tests.jobs.test_recovery import finished, lose_broker_messages, worker_factory, write_pool_file  # noqa: F401
from tests.scoring.learning.test_retraining import FAST, constant_current, label_everything, lenient_gate, make_pool  # noqa: F401

IMPORT_LINES = 4000
DOWN_SECONDS = 4  # how long the database is away: several of the task's retries (annotate/tasks.py)


def as_postgres_user() -> list[str]:
    """initdb and postgres refuse to run as root: the machine's own postgres user runs them."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


class PrivatePostgreSQL:
    """A PostgreSQL cluster of its own (initdb in a temporary folder, a free port), stopped and
    started by the test; its data outlives a restart, as a real server's does."""

    def __init__(self) -> None:
        binaries = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not binaries:
            pytest.skip("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin)")
        self.bin = Path(binaries[-1]).parent
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="stepwise-faults-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        self.data = self.folder / "data"
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")

    def _run(self, tool: str, *args: str) -> None:
        ran = subprocess.run([*as_postgres_user(), str(self.bin / tool), *args],
                             capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, f"{tool} failed: {ran.stdout[-2000:]}{ran.stderr[-2000:]}"

    def start(self) -> None:
        # fsync off: the faults here are restarts of the server, not of the machine.
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "start", "-w", "-t", "30", "-D", str(self.data), "-l", str(self.folder / "server.log"),
                  "-o", options)

    def stop(self) -> None:
        """A fast shutdown: open transactions are rolled back, every client is disconnected."""
        self._run("pg_ctl", "stop", "-w", "-m", "fast", "-D", str(self.data))

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def log(self) -> str:
        path = self.folder / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "stop", "-w", "-m", "immediate", "-D", str(self.data))
        shutil.rmtree(self.folder, ignore_errors=True)


def copy_test_database(to: PrivatePostgreSQL, database: str) -> None:
    """The test database as it is now (schema and committed rows) into `database` on the private server."""
    with psycopg.connect(to.url("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    dump = subprocess.Popen([str(to.bin / "pg_dump"), "--no-owner", "--no-privileges",
                             tests.conftest._test_database_url()], stdout=subprocess.PIPE)
    restore = subprocess.run([str(to.bin / "psql"), "-q", "-v", "ON_ERROR_STOP=1", to.url(database)],
                             stdin=dump.stdout, capture_output=True, text=True, timeout=120)
    assert dump.wait(timeout=120) == 0 and restore.returncode == 0, restore.stderr[-3000:]


@pytest.fixture
def private_postgresql():
    server = PrivatePostgreSQL()
    try:
        server.start()
        yield server
    finally:
        server.remove()


# --- PostgreSQL restarted while an import writes ---------------------------------------------------


def read_row(url: str, sql: str, params: tuple = ()) -> tuple:
    """One row, read on a fresh connection (None while the server is down)."""
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute(sql, params).fetchone()
    except psycopg.OperationalError:
        return None


def import_state(url: str, pk: int) -> tuple | None:
    return read_row(url, f"SELECT state, done, created, duplicates, errors, queued, error FROM "
                         f"{ImportJob._meta.db_table} WHERE id = %s", (pk,))


def count(url: str, model) -> int:
    return read_row(url, f"SELECT count(*) FROM {model._meta.db_table}")[0]


@pytest.mark.postgresql
def test_an_import_goes_on_after_its_postgresql_server_restarts_mid_write(
    private_postgresql, worker_factory, tmp_path, monkeypatch  # noqa: F811 (fixtures imported above)
):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    path = write_pool_file(tmp_path / "big.jsonl", IMPORT_LINES)
    job = create_import_job(path=path, original_name="big.jsonl")  # its message waits in the broker
    # A queue large enough for every line, so that "queued" counts the lines the first attempt wrote too.
    LabelingConfig.objects.update_or_create(project=job.project, defaults={"queue_size": 2 * IMPORT_LINES})
    copy_test_database(private_postgresql, "stepwise")
    url = private_postgresql.url("stepwise")
    worker_factory(DATABASE_URL=url)

    wait_for(lambda: (import_state(url, job.pk) or (None, 0))[1] > 0, timeout=60, interval=0.05)
    private_postgresql.stop()  # mid-batch: the batch's transaction is rolled back by the server
    stopped = time.monotonic()
    time.sleep(DOWN_SECONDS)
    private_postgresql.start()
    state = import_state(url, job.pk)
    assert state is not None and state[0] not in FINISHED_STATES, f"import ended before the restart: {state}"
    # Progress is recorded after a batch commits: these lines were written before the restart.
    written_before = state[1]

    wait_for(lambda: (import_state(url, job.pk) or ("",))[0] in FINISHED_STATES, timeout=90, interval=0.2)
    recovered_in = time.monotonic() - stopped
    state, done, created, duplicates, errors, queued, error = import_state(url, job.pk)
    assert (state, errors, error) == (JobState.SUCCEEDED, 0, ""), private_postgresql.log()
    # The resumed attempt finds by content hash what the first one committed, and reports those
    # lines as what they were: created by this job, each once. No line is a duplicate of itself.
    assert (done, created, duplicates) == (IMPORT_LINES, IMPORT_LINES, 0)
    assert count(url, Solution) == IMPORT_LINES and count(url, Step) == 2 * IMPORT_LINES
    assert count(url, SampleLine) == IMPORT_LINES  # each line of the file recorded once
    assert read_row(url, f"SELECT count(*) FROM {Solution._meta.db_table} WHERE sample_count <> 1")[0] == 0
    assert queued == IMPORT_LINES
    report = Counter(json.loads(line)["status"] for line in Path(job.report_path).read_text().splitlines())
    assert report == {"created": IMPORT_LINES}, report
    print(f"\nimport of {IMPORT_LINES} lines: server down {DOWN_SECONDS} s, "
          f"{written_before} lines committed before the restart, finished {recovered_in:.1f} s after the stop")


# --- a worker killed with -9 while an export writes ------------------------------------------------


EXPORT_ANNOTATIONS = 8000


def import_annotations(tmp_path: Path, n: int) -> None:
    """`n` submitted annotations: the PRM800K fixture line, rated by `n` labelers."""
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps({**PHASE2_LINE, "labeler": f"labeler-{k}"}) + "\n" for k in range(n)))
    summary = importing.import_pool(path=path, format="prm800k")
    assert summary.created == n and summary.errors == 0, summary.first_errors


def test_an_export_whose_worker_is_killed_is_written_once_and_whole_by_the_next_worker(
    worker_factory, tmp_path  # noqa: F811 (a fixture imported above)
):
    import_annotations(tmp_path, EXPORT_ANNOTATIONS)
    worker = worker_factory()
    job = create_export_job(format="prm800k", options=ExportOptions())
    wait_for(lambda: ExportJob.objects.get(pk=job.pk).done > 0, timeout=60, interval=0.02)
    worker.kill()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.done < EXPORT_ANNOTATIONS, "export ended before the kill"
    killed_at = job.done

    worker_factory()  # its start finds the dead holder and resends the export
    wait_for(lambda: ExportJob.objects.get(pk=job.pk).state in FINISHED_STATES, timeout=60)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    assert job.lines == job.done == EXPORT_ANNOTATIONS
    lines = Path(job.path).read_text().splitlines()
    assert len(lines) == EXPORT_ANNOTATIONS
    assert sorted(json.loads(line)["labeler"] for line in lines) == sorted(
        f"labeler-{k}" for k in range(EXPORT_ANNOTATIONS))  # each annotation once, each line whole
    # The killed attempt's unfinished file was never moved into place; only the finished one is there.
    # (Other tests' exports may share the folder: only this job's names count.)
    mine = [p.name for p in Path(job.path).parent.iterdir() if p.name.startswith(f"export-{job.pk}-")]
    assert mine == [Path(job.path).name]
    assert ExportJob.objects.count() == 1
    print(f"\nexport of {EXPORT_ANNOTATIONS} annotations: worker killed at {killed_at}, finished whole by the next")


# --- the broker restarted while an export and a training run are under way -------------------------


class PrivateRedis:
    """A redis-server of its own on a free port, keeping nothing on disk (as the project's Redis is
    run): a restart loses every queued and unacknowledged message."""

    def __init__(self, folder: Path) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("no redis-server")
        self.port, self.folder = free_port(), folder
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self._answers(), timeout=10, interval=0.05)

    def _answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis.from_url(self.url, socket_timeout=1).ping())
        except redis.ConnectionError:
            return False

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self, *, while_running) -> None:
        """Killed with -9 while the job `while_running` runs, and started again on the same port: empty."""
        self.kill()
        job = type(while_running).objects.get(pk=while_running.pk)
        assert job.state == JobState.RUNNING, f"{job} ended before the broker's restart"
        time.sleep(1)
        self.start()


@pytest.fixture
def private_redis(tmp_path):
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.kill()


def beat_reconciles_until(broker_url: str, done, timeout: float) -> None:
    """What beat does every 30 s (settings.CELERY_BEAT_SCHEDULE), here every second, on the private
    broker: the worker resends the tasks of jobs pending for STEPWISE_JOB_REQUEUE_SECONDS."""
    from config.celery import app

    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "jobs not recovered"
        with app.connection_for_write(broker_url) as broker:
            reconcile_jobs_task.apply_async(connection=broker)
        time.sleep(1)


@pytest.mark.slow
@pytest.mark.postgresql
def test_an_export_and_a_training_run_finish_once_although_the_broker_restarts_under_each(
    lenient_gate, constant_current, worker_factory, private_redis, tmp_path  # noqa: F811
):
    make_pool()
    assert label_everything(user_with_role("trainer-ann", "annotator")) == 48
    import_annotations(tmp_path, EXPORT_ANNOTATIONS)
    export = create_export_job(format="prm800k", options=ExportOptions())
    run = retraining.start_training_run(options=FAST)
    # Their messages went to the test's broker; this worker's start sends them again to its own.
    worker_factory(REDIS_URL=private_redis.url, STEPWISE_JOB_REQUEUE_SECONDS="2")

    wait_for(lambda: ExportJob.objects.get(pk=export.pk).done > 0, timeout=60, interval=0.02)
    private_redis.restart(while_running=export)  # the training run's queued message is gone with it
    beat_reconciles_until(private_redis.url, lambda: TrainingRun.objects.get(pk=run.pk).state != JobState.PENDING,
                          timeout=60)
    private_redis.restart(while_running=run)
    beat_reconciles_until(private_redis.url, lambda: finished(ExportJob, export.pk) and finished(TrainingRun, run.pk),
                          timeout=120)

    export.refresh_from_db()
    assert export.state == JobState.SUCCEEDED and export.lines == EXPORT_ANNOTATIONS + 48, export.error
    assert len(Path(export.path).read_text().splitlines()) == export.lines
    run.refresh_from_db()
    assert run.state == JobState.SUCCEEDED, run.error + run.log
    assert TrainingRun.objects.count() == 1 and ModelVersion.objects.count() == 2  # trained and registered once
    assert ExportJob.objects.count() == 1
