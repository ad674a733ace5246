"""`./stepwise run` keeps its processes running: a worker, scorer or beat that stops by itself is
started again with growing pauses while the site stays up, one that keeps crashing is left stopped
and reported (terminal, its log, the admin's home page), and a rescore whose worker group is
killed with -9 finishes by itself.

The script's own `start` and `watch` run by sourcing it, as `run` calls them after its stages,
with stand-ins (`sleep`) for the processes a test does not look at.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.states import JobState
from scoring.models import RescoreJob, SolutionScore
from scoring.rescoring import rescore as scoring
from tests.conftest import wait_for, worker_environment
from tests.factories import user_with_role
from tests.jobs.test_recovery import finished, lose_broker_messages, tiny_current  # noqa: F401 (a fixture)
from tests.scoring.test_tasks import make_pool
from tests.test_stepwise_script import SCRIPT, Output, as_from_a_terminal, started_by_run, stop_leftovers

STAND_IN = "sleep 600"


def supervised(data_dir: Path, worker: str, *, env: dict[str, str] | None = None,
               settings: str = "") -> tuple[subprocess.Popen, Output]:
    """The script's start and watch, as `run` ends: web, jobs, scorer and beat stand-ins, `worker` real."""
    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    script = (f'source "{SCRIPT}" && {settings} trap stopped INT TERM && trap stop_all EXIT && '
              f'start web "{logs}" {STAND_IN} && start worker "{logs}" {worker} && '
              f'start jobs "{logs}" {STAND_IN} && start scorer "{logs}" {STAND_IN} && '
              f'start beat "{logs}" {STAND_IN} && watch "{logs}"')
    process = subprocess.Popen(
        ["bash", "-c", script], cwd=SCRIPT.parent, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**(env or os.environ), "STEPWISE_DATA_DIR": str(data_dir), "STEPWISE_VENV": sys.prefix},
        preexec_fn=as_from_a_terminal)
    return process, Output(process.stdout)


def stop(process: subprocess.Popen, output: Output) -> None:
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 0, output.text


@pytest.mark.slow
@pytest.mark.django_db
def test_a_process_that_keeps_crashing_is_started_again_with_growing_pauses_then_left_stopped_and_reported(
    tmp_path, client, settings
):
    process, output = supervised(tmp_path, "bash -c 'echo starting; exit 3'", settings="CRASH_LIMIT=3;")
    try:
        output.wait_for("so it is not started again", 30, process)
        lines = [line.strip() for line in output.lines if "worker process" in line]
        assert lines[:3] == [
            "The worker process stopped by itself (exit status 3); starting it again in 1 s "
            f"(log: {tmp_path}/logs/worker.log).",
            "The worker process stopped by itself (exit status 3); starting it again in 2 s "
            f"(log: {tmp_path}/logs/worker.log).",
            "The worker process stopped by itself (exit status 3): 3 times in a row within 30 s of its start, "
            f"so it is not started again; the end of {tmp_path}/logs/worker.log:",
        ]
        log = (tmp_path / "logs" / "worker.log").read_text()
        assert log.count("starting\n") == 3 and "so it is not started again" in log
        # The rest run on (the site with them), and nothing starts the worker again.
        time.sleep(3)
        running = started_by_run(tmp_path).values()
        assert sum(command.startswith(STAND_IN) for command in running) == 4 and process.poll() is None  # web, jobs,
        # scorer and beat
        assert log == (tmp_path / "logs" / "worker.log").read_text()
        stop(process, output)
    finally:
        stop_leftovers(process, tmp_path)

    # The admin's home page says so (and no one else's).
    settings.DATA_DIR = tmp_path
    report = (tmp_path / "logs" / "worker.failed").read_text().strip()
    assert report.startswith("The worker process stopped 3 times in a row within 30 s of its start")
    client.force_login(user_with_role("boss", "admin", is_staff=True, is_superuser=True))
    assert report in client.get("/", follow=True).content.decode()
    client.force_login(user_with_role("kim", "annotator"))
    assert "Stopped processes" not in client.get("/", follow=True).content.decode()


@pytest.mark.slow
def test_a_rescore_whose_worker_group_is_killed_finishes_with_the_worker_started_again(
    tiny_current, tmp_path  # noqa: F811
):
    make_pool(120)
    lose_broker_messages()  # no leftovers from earlier tests
    env = {**worker_environment(), "STEPWISE_RESCORE_CHUNK_SIZE": "4", "STEPWISE_JOB_HEARTBEAT_SECONDS": "0.5",
           "STEPWISE_JOB_STALE_SECONDS": "3"}
    worker = f'"{sys.prefix}/bin/celery" -A config worker -Q default,ml --concurrency 1 --loglevel INFO -n worker@%h'
    process, output = supervised(tmp_path, worker, env=env)
    try:
        job = scoring.start_rescore(model_version=tiny_current)
        wait_for(lambda: RescoreJob.objects.get(pk=job.pk).chunks_done >= 1, timeout=120, interval=0.05)
        workers = [pid for pid, command in started_by_run(tmp_path).items()
                   if "/bin/celery -A config worker" in command and not command.startswith("bash")]
        group = os.getpgid(min(workers))  # the worker leads its group (the script's start)
        assert group not in (os.getpgid(0), os.getpgid(process.pid))
        os.killpg(group, signal.SIGKILL)  # the worker and its pool, as a crash would
        killed = time.monotonic()
        job.refresh_from_db()
        assert job.state == JobState.RUNNING and job.chunks_done < job.chunks_total, "job ended before the kill"
        held_by = job.claimed_by

        output.wait_for("The worker process stopped by itself (killed by signal 9); starting it again in 1 s", 10,
                        process)
        # The new worker's start finds the dead holder and takes the job over: no beat, no hand.
        wait_for(lambda: RescoreJob.objects.get(pk=job.pk).claimed_by not in ("", held_by), timeout=60, interval=0.1)
        taken_over = time.monotonic() - killed
        wait_for(lambda: finished(RescoreJob, job.pk), timeout=240)
        job.refresh_from_db()
        assert job.state == JobState.SUCCEEDED and job.chunks_done == job.chunks_total == 30, job.error
        assert SolutionScore.objects.filter(model_version=tiny_current).count() == 120
        print(f"rescore taken over {taken_over:.1f} s after kill -9 of the worker group; "
              f"finished {time.monotonic() - killed:.1f} s after it")
        assert taken_over < 60, f"taken over {taken_over:.0f} s after the kill"
        stop(process, output)
    finally:
        stop_leftovers(process, tmp_path)
        lose_broker_messages()  # the killed worker's messages are not the next test's
