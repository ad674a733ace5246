"""The default settings work behind PgBouncer in transaction mode, the pooler most PostgreSQL
deployments put in front of the server.

A real `pgbouncer` (Debian's package; .ci/run installs it) runs in transaction mode on a free
port in front of the test server. A connection finds out that it goes through a pooler, and
the labeling, claiming, export and fast-path SQL tests run once through it with the project's
default settings: with prepared statements kept per connection, as on a direct one, the
claims failed with "prepared statement _pg3_0 already exists".
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from bench.loadtest import free_port
from infra.postgresql.base import through_pooler
from tests.conftest import REPO_ROOT, wait_for

# Through the pooler: claims under concurrency, the labeling flow, exports (which iterate),
# the fast path's statements. Left out: the check that a direct connection prepares them.
SUBSET = ["tests/annotate/labeling/test_concurrency.py", "tests/annotate/labeling/test_labeling.py",
          "tests/annotate/pool/test_exporting.py", "tests/infra/test_statements.py"]
DIRECT_ONLY = "not test_postgresql_prepares_a_statement_a_connection_runs_again_and_again"


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        pytest.skip("no pgbouncer (apt-get install pgbouncer; .ci/run installs it)")
    return found


def server() -> dict:
    settings = connection.settings_dict
    return {"host": settings["HOST"] or "127.0.0.1", "port": int(settings["PORT"] or 5432),
            "user": settings["USER"] or "postgres"}


@pytest.fixture
def pgbouncer():
    """pgbouncer in transaction mode on a free port, in front of the test server; yields the port."""
    port, target = free_port(), server()
    # Readable by the user pgbouncer drops to (it refuses to run as root).
    folder = Path(tempfile.mkdtemp(prefix="stepwise-pgbouncer-"))
    folder.chmod(0o755)
    (folder / "users.txt").write_text(f'"{target["user"]}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n* = host={target['host']} port={target['port']}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\npool_mode = transaction\n"
        "max_client_conn = 200\ndefault_pool_size = 10\nignore_startup_parameters = extra_float_digits,options\n"
    )
    for path in folder.iterdir():
        path.chmod(0o644)
    as_user = ["-u", "nobody"] if os.geteuid() == 0 else []
    process = subprocess.Popen([pgbouncer_binary(), *as_user, str(folder / "pgbouncer.ini")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_port(port, process)
        yield port
    finally:
        process.send_signal(signal.SIGINT)  # pgbouncer's immediate shutdown
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder)


def wait_for_port(port: int, process: subprocess.Popen, seconds: float = 15) -> None:
    def accepts_connections() -> bool:
        if process.poll() is not None:
            pytest.fail(f"pgbouncer exited: {process.stdout.read()}")
        try:
            psycopg.connect(host="127.0.0.1", port=port, user=server()["user"], dbname="postgres",
                            connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    wait_for(accepts_connections, timeout=seconds)


@pytest.mark.postgresql
@pytest.mark.django_db
def test_a_connection_knows_whether_a_pooler_stands_in_between(pgbouncer):
    connection.ensure_connection()
    assert connection.behind_pooler is False
    assert connection.connection.prepare_threshold == 5  # direct: the fast path's statements are prepared
    with psycopg.connect(host="127.0.0.1", port=pgbouncer, user=server()["user"], dbname="postgres") as pooled:
        assert through_pooler(pooled) is True
    with psycopg.connect(**server(), dbname="postgres") as direct:
        assert through_pooler(direct) is False


@pytest.mark.postgresql
@pytest.mark.django_db
def test_the_labeling_tests_pass_through_pgbouncer_in_transaction_mode_with_default_settings(pgbouncer, tmp_path):
    database = f"{connection.settings_dict['NAME']}_pgbouncer"
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("DB_") and name not in {"CI", "STEPWISE_DATA_DIR"}}
    env["DATABASE_URL"] = f"postgres://{server()['user']}@127.0.0.1:{pgbouncer}/{database}"
    env["STEPWISE_DATA_DIR"] = str(tmp_path / "data")
    try:
        # --reuse-db: pytest-django would drop its database through the pooler, which still
        # holds connections to it; it is dropped below, on the server, instead.
        ran = subprocess.run([sys.executable, "-m", "pytest", *SUBSET, "-k", DIRECT_ONLY, "-q", "-x",
                              "--create-db", "--reuse-db", "-p", "no:cacheprovider"],
                             cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    finally:
        with psycopg.connect(**server(), dbname="postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "test_{database}" WITH (FORCE)')
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-2000:]
    assert " passed" in ran.stdout and "skipped" not in ran.stdout, ran.stdout[-3000:]
