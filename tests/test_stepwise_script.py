"""The start script `./stepwise`: `manage` runs any management command in the environment
`run` uses, and `run`'s start-up output is one true line per stage.

The full `./stepwise run` loads a model and starts three processes, so these tests drive its
pieces: `manage` through a subprocess in a fresh shell's environment (no venv on PATH, no
SECRET_KEY), the server wait by sourcing the script, and the commands `run` calls for their
output lines.
"""
import io
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "stepwise"


def fresh_shell_env(data_dir: Path) -> dict[str, str]:
    """A new shell's environment: no project settings, no venv on PATH, the test venv named
    in STEPWISE_VENV so nothing installs."""
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {
        name: value for name, value in os.environ.items()
        if name not in {"SECRET_KEY", "DEBUG", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV"}
        and not name.startswith("CELERY_")
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["STEPWISE_DATA_DIR"] = str(data_dir)
    env["STEPWISE_VENV"] = sys.prefix
    return env


def stepwise(*args: str, env: dict[str, str], timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_stepwise_manage_runs_a_command_with_the_secret_key_run_writes(tmp_path):
    env = fresh_shell_env(tmp_path)
    checked = stepwise("manage", "check", env=env)
    assert checked.returncode == 0, checked.stderr
    assert "System check identified no issues" in checked.stdout
    key = (tmp_path / "secret_key").read_text().strip()
    assert len(key) > 40

    # The same key next time, and stdout is the command's own output only, so
    # `TOKEN=$(./stepwise manage create_api_token NAME)` captures just the token.
    print_key = "from django.conf import settings; print(settings.SECRET_KEY)"
    shown = stepwise("manage", "shell", "--no-imports", "-c", print_key, env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == key + "\n"


def test_stepwise_manage_passes_the_commands_exit_status_on(tmp_path):
    failed = stepwise("manage", "no_such_command", env=fresh_shell_env(tmp_path))
    assert failed.returncode != 0 and "Unknown command" in failed.stderr


def wait_for_server(url: str, seconds: int) -> subprocess.CompletedProcess:
    """The script's own wait, run by sourcing it (sourcing defines functions and runs nothing)."""
    return subprocess.run(
        ["bash", "-c", f'source "{SCRIPT}" && wait_for_server "{url}" {seconds}'],
        cwd=ROOT, env={**os.environ, "STEPWISE_VENV": sys.prefix}, capture_output=True, text=True, timeout=60,
    )


class Redirect(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(302)  # the home page sends a visitor to the login page
        self.send_header("Location", "/login/")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_url_waits_until_the_server_answers(unused_port):
    server = ThreadingHTTPServer(("127.0.0.1", unused_port), Redirect)
    # The server comes up a second after the wait begins, as gunicorn does after its workers boot.
    began = time.monotonic()
    threading.Thread(target=lambda: (time.sleep(1), server.serve_forever()), daemon=True).start()
    try:
        waited = wait_for_server(f"http://127.0.0.1:{unused_port}/", 20)
        assert waited.returncode == 0, waited.stderr
        assert 0.9 < time.monotonic() - began < 20
    finally:
        server.shutdown()  # returns once the delayed serve_forever has started and stopped
        server.server_close()


def test_the_wait_for_a_server_that_never_answers_is_bounded(unused_port):
    began = time.monotonic()
    waited = wait_for_server(f"http://127.0.0.1:{unused_port}/", 2)
    assert waited.returncode != 0
    assert time.monotonic() - began < 15


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.django_db
def test_retrain_schedule_says_its_interval_once():
    out = io.StringIO()
    call_command("retrain_schedule", stdout=out)
    line = out.getvalue()
    assert "every 30 minutes" in line and "every every" not in line
    assert "50 new labels" in line and line.count("\n") == 1


@pytest.mark.django_db
def test_seed_demo_says_what_it_imported_on_a_new_database_and_nothing_new_after():
    from annotate.models import Solution

    first = io.StringIO()
    call_command("seed_demo", problems=8, stdout=first)
    n = Solution.objects.count()
    assert first.getvalue().startswith(f"Demo pool: {n} solutions to 8 problems imported")
    assert "already" not in first.getvalue() and first.getvalue().count("\n") == 1

    again = io.StringIO()
    call_command("seed_demo", problems=8, stdout=again)
    assert again.getvalue().startswith(f"Demo pool: already imported ({n} solutions)")
    assert Solution.objects.count() == n
