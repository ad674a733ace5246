"""Fixtures of the ground floor's tests: a cache whose Redis is unreachable, and the site under
attack (the web server as `./stepwise run` starts it, with users and tasks)."""
from pathlib import Path

import pytest
from django.core.cache import caches
from django.core.management import call_command
from django.test import override_settings
from redis.exceptions import ConnectionError as RedisConnectionError

from annotate.labeling import queueing
from annotate.models import LabelingConfig, Project
from bench.loadtest import Server
from tests.conftest import _test_database_url
from tests.factories import SolutionFactory, user_with_role
from tests.infra import attacks
from tests.infra.attacks import MIB

CLIENT_TIMEOUT = 4  # STEPWISE_CLIENT_TIMEOUT_SECONDS for the server under attack
LOGIN_FAILURE_LIMIT = 3
BODY_LIMIT = 10 * MIB  # STEPWISE_MAX_BODY_BYTES, the login page's limit


@pytest.fixture(scope="session")
def static_root(tmp_path_factory) -> Path:
    """The site's static files, collected once, and a large one for the slow readers."""
    root = tmp_path_factory.mktemp("staticfiles")
    with override_settings(STATIC_ROOT=root):
        call_command("collectstatic", "--noinput", verbosity=0)
    (root / attacks.BIG_STATIC).write_bytes(b"x" * (4 * MIB))
    return root


def attack_environment(tmp_path: Path, static_root: Path) -> dict[str, str]:
    """The server's environment for the attacks: its own data folder with the static files,
    its own temporary folder (watched), short client timeout, 127.0.0.1 a trusted proxy."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "staticfiles").symlink_to(static_root)
    (tmp_path / "tmp").mkdir()
    return {"STEPWISE_DATA_DIR": str(tmp_path / "data"), "TMPDIR": str(tmp_path / "tmp"),
            "STEPWISE_CLIENT_TIMEOUT_SECONDS": str(CLIENT_TIMEOUT), "STEPWISE_TRUSTED_PROXIES": "127.0.0.1",
            "STEPWISE_LOGIN_FAILURE_LIMIT": str(LOGIN_FAILURE_LIMIT), "STEPWISE_MAX_BODY_BYTES": str(BODY_LIMIT)}


@pytest.fixture
def web_server(transactional_db, tmp_path, static_root):
    """The server exactly as `./stepwise run` starts it (loadtest.Server: the script's web_server),
    on the test database, its access log in a file."""
    log = tmp_path / "web.log"
    server = Server(database_url=_test_database_url(), log=log, extra_env=attack_environment(tmp_path, static_root))
    try:
        server.wait_until_up(90)
        yield server, log
    finally:
        server.stop()


@pytest.fixture
def work_to_claim(transactional_db):
    LabelingConfig.objects.update_or_create(pk=LabelingConfig.of(Project.objects.sole()).pk,
                                            defaults={"qc_rate": 0, "screening_required": False})
    for _ in range(60):
        SolutionFactory()
    queueing.ensure_default_queue()
    for name in ("chunky", "forged", "control"):  # the attacks' own accounts
        user_with_role(name, "annotator")
    return [user_with_role(f"patient{i}", "annotator").username for i in range(8)]


class Unreachable:
    """A cache whose every operation fails as django-redis' does with Redis stopped."""

    def close(self, **kwargs) -> None:  # at the end of each request: no network (django-redis)
        pass

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        return fail


@pytest.fixture
def redis_stopped(monkeypatch):
    """This thread's `caches["throttle"]` replaced by one that cannot reach its server."""
    monkeypatch.setattr(caches._connections, "throttle", Unreachable(), raising=False)
