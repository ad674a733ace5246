"""The site under attack: the web server as `./stepwise run` starts it, with users and tasks."""
from pathlib import Path

import pytest

from annotate.labeling import queueing
from annotate.models import LabelingConfig
from bench.loadtest import Server
from tests.conftest import _test_database_url
from tests.factories import SolutionFactory, user_with_role
from tests.infra import attacks
from tests.infra.attacks import MIB

CLIENT_TIMEOUT = 4  # STEPWISE_CLIENT_TIMEOUT_SECONDS for the server under attack
LOGIN_FAILURE_LIMIT = 3
BODY_LIMIT = 10 * MIB  # STEPWISE_MAX_BODY_BYTES, the login page's limit


def attack_environment(tmp_path: Path) -> dict[str, str]:
    """The server's environment for the attacks: its own data folder with a large static file,
    its own temporary folder (watched), short client timeout, 127.0.0.1 a trusted proxy."""
    static = tmp_path / "data" / "staticfiles"
    static.mkdir(parents=True)
    (static / attacks.BIG_STATIC).write_bytes(b"x" * (4 * MIB))
    (tmp_path / "tmp").mkdir()
    return {"STEPWISE_DATA_DIR": str(tmp_path / "data"), "TMPDIR": str(tmp_path / "tmp"),
            "STEPWISE_CLIENT_TIMEOUT_SECONDS": str(CLIENT_TIMEOUT), "STEPWISE_TRUSTED_PROXIES": "127.0.0.1",
            "STEPWISE_LOGIN_FAILURE_LIMIT": str(LOGIN_FAILURE_LIMIT), "STEPWISE_MAX_BODY_BYTES": str(BODY_LIMIT)}


@pytest.fixture
def web_server(transactional_db, tmp_path):
    """The server exactly as `./stepwise run` starts it (loadtest.Server: the script's web_server),
    on the test database, its access log in a file."""
    log = tmp_path / "web.log"
    server = Server(database_url=_test_database_url(), log=log, extra_env=attack_environment(tmp_path))
    try:
        server.wait_until_up(90)
        yield server, log
    finally:
        server.stop()


@pytest.fixture
def work_to_claim(transactional_db):
    LabelingConfig.objects.update_or_create(pk=LabelingConfig.get().pk,
                                            defaults={"qc_rate": 0, "screening_required": False})
    for _ in range(60):
        SolutionFactory()
    queueing.ensure_default_queue()
    for name in ("chunky", "forged", "control"):  # the attacks' own accounts
        user_with_role(name, "annotator")
    return [user_with_role(f"patient{i}", "annotator").username for i in range(8)]
