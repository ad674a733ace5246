"""The running app the reward client talks to: the web server, one real ml worker, the tiny PRM.

Package-scoped: the reward tests and the install test share one server and one worker, as
starting either takes most of a test's time on a small machine.
"""
import pytest
from rest_framework.authtoken.models import Token

from bench.loadtest import Server
from bench.tiny import build_tiny_prm
from scoring.store import registry
from tests.conftest import WorkerProcess, _test_database_url


@pytest.fixture(scope="package")
def web(django_db_setup, django_db_blocker):
    """The web server on the test database, as `./stepwise run` serves the app."""
    server = Server(database_url=_test_database_url(), workers=1)
    try:
        server.wait_until_up(90)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="package")
def worker(django_db_setup, tmp_path_factory):
    """One real ml worker for the package's tests (each starts from an empty database)."""
    process = WorkerProcess(tmp_path_factory.mktemp("worker") / "worker.log")
    process.start()
    yield process
    process.stop()


@pytest.fixture
def token(reviewer) -> str:
    return Token.objects.create(user=reviewer).key


@pytest.fixture(scope="package")
def tiny_folder(tmp_path_factory):
    return build_tiny_prm(tmp_path_factory.mktemp("prm") / "tiny")


def tiny_version(folder, *, make_current=True):
    return registry.register_model_version(name="tiny", path=folder, make_current=make_current)
