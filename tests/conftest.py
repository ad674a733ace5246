"""Shared fixtures: users with roles, a tiny policy model and its OpenAI-compatible server, and a real
Celery worker process."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management.base import BaseCommand

from tests import ci
from tests.browsing import artifacts, browser, new_page  # noqa: F401 (fixtures: one browser for the whole run)
from tests.factories import user_with_role

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_DATA = REPO_ROOT / "tests" / "data"  # real public data the tests read (tests/data/README.md)


@pytest.fixture(autouse=True)
def _fresh_process_memos():
    """Each test starts from what its database says: a memo from an earlier test (whose rows
    were rolled back) must not answer for this one."""
    from infra.memo import forget_all

    forget_all()
    yield
    forget_all()


_DATABASE_FIXTURES = {"db", "transactional_db", "live_server"}


@pytest.fixture(autouse=True)
def _as_a_fresh_install(request):
    """A test with the database starts where a fresh install does, with the project every row
    defaults to (migration annotate 0021 makes it): a transactional test's flush removes it,
    and a test must not pass or fail by which ran before it on its process."""
    if _DATABASE_FIXTURES.isdisjoint(request.fixturenames) and not request.node.get_closest_marker("django_db"):
        return
    from annotate.models import Project
    from annotate.models.projects import DEFAULT_SLUG

    request.getfixturevalue("db")  # the test's own database access, transactional or not
    Project.objects.get_or_create(slug=DEFAULT_SLUG, defaults={"name": "Default"})


@pytest.fixture(autouse=True)
def _no_job_beaten_after_its_test():
    """A job a test ran in this process and left unfinished (as a killed worker would) is let go
    when the test ends, as celery's task_postrun lets go a task's: else the heartbeat thread
    writes to it in a later test, whose database may be another or closed to it."""
    from jobs.holders import heartbeats

    yield
    heartbeats.release_all()


@pytest.fixture
def annotator(db):
    return user_with_role("ann", "annotator")


@pytest.fixture
def reviewer(db):
    return user_with_role("rev", "reviewer")


@pytest.fixture
def admin_user(db):
    return user_with_role("boss", "admin", is_staff=True, is_superuser=True)


@pytest.fixture(scope="session")
def tiny_causal_lm(tmp_path_factory):
    """A seeded tiny Llama folder (safetensors): a policy model that writes in milliseconds."""
    from bench.tiny import build_tiny_backbone  # torch: imported by the tests that need it only

    return build_tiny_backbone(tmp_path_factory.mktemp("tiny-causal-lm") / "tiny-lm")


@pytest.fixture(scope="session")
def openai_server(tiny_causal_lm):
    """`python -m bench.openai_server` on the tiny model, without injected faults."""
    from bench.openai_server import ServerProcess

    with ServerProcess(tiny_causal_lm, threads=1) as server:
        yield server


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test, as before it afterwards."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _test_database_url() -> str:
    """The URL of the test database pytest-django created, for processes we start."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or ""
    auth = f"{user}@" if user else ""
    return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


def worker_environment() -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = _test_database_url()
    env["PYTHONUNBUFFERED"] = "1"
    return env


class WorkerProcess:
    """A `celery worker` child process serving `queues` (every queue by default), started and stopped by tests."""

    def __init__(self, log_path: Path, queues: str = "default,ml,score", env: dict[str, str] | None = None):
        self.log_path = log_path
        self.queues = queues
        self.env = env or {}  # on top of the test's environment (a private database or broker)
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> None:
        ci.uses("real worker")
        self.log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", self.queues,
             "--pool", "prefork", "--concurrency", "1", "--loglevel", "INFO", "--without-gossip",
             "--without-mingle", "--without-heartbeat"],
            cwd=REPO_ROOT, env={**worker_environment(), **self.env}, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b"ready." in self.log_path.read_bytes():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"Celery worker did not start:\n{self.log_path.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL the whole worker process group, as a crash would."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


@pytest.fixture
def celery_worker_process(transactional_db, tmp_path):
    """A real worker process on the test database; tests see its effects after commit."""
    worker = WorkerProcess(tmp_path / "worker.log")
    worker.start()
    yield worker
    worker.stop()


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.2):
    """Poll until predicate() is truthy; return its value or fail with a timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def option_choices(command: type[BaseCommand], option: str) -> list[str]:
    """The choices a management command's option offers, read from its own argument parser."""
    parser = command().create_parser("manage.py", command.__module__.rsplit(".", 1)[-1])
    (action,) = [action for action in parser._actions if action.dest == option]
    return list(action.choices or ())
