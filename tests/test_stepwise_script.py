"""The start script `./stepwise`: `manage` runs any management command in the environment
`run` uses, `run`'s start-up output is one true line per stage, and Ctrl-C stops all it started.

`manage` runs through a subprocess in a fresh shell's environment (no venv on PATH, no
SECRET_KEY), the server wait and the install's progress lines by sourcing the script, the
commands `run` calls for their output lines; `run` itself starts for real, on SQLite and the
file-system broker, and is stopped as a terminal's Ctrl-C would (SIGINT to the script) while
the default model is still being set up.
"""
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
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


# What pip prints (with --progress-bar off) while it installs: a new package, a big download from
# an extra index, one already there, a cached one, the install, the end.
PIP_OUTPUT = """\
Looking in indexes: https://pypi.org/simple
Collecting Django==5.2.19 (from -r requirements.txt (line 5))
  Downloading django-5.2.19-py3-none-any.whl (8.3 MB)
Collecting torch==2.13.0+cpu (from -r requirements.txt (line 20))
  Downloading https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl (190.5 MB)
Requirement already satisfied: asgiref>=3.8.1 in ./.venv/lib/python3.11/site-packages (from Django==5.2.19)
Collecting sqlparse>=0.3.1 (from Django==5.2.19->-r requirements.txt (line 5))
  Using cached sqlparse-0.5.3-py3-none-any.whl (44 kB)
Installing collected packages: sqlparse, torch, Django
Successfully installed Django-5.2.19 sqlparse-0.5.3 torch-2.13.0+cpu
"""


def sourced(command: str, **kwargs) -> subprocess.CompletedProcess:
    """`command` in a shell that sourced the script (which defines its functions and runs nothing)."""
    return subprocess.run(
        ["bash", "-c", f'source "{SCRIPT}" && {command}'], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "STEPWISE_VENV": sys.prefix}, **kwargs,
    )


def test_pip_progress_turns_pips_lines_into_a_few_a_newcomer_can_read():
    shown = sourced("pip_progress 2", input=PIP_OUTPUT)
    assert shown.returncode == 0 and shown.stdout == ""
    assert shown.stderr.splitlines() == [
        "  packages: 2 found so far ...",
        "  packages: downloading torch (190 MB) ...",  # the small Django download says nothing
        "  packages: 4 found so far ...",
        "  packages: installing 3 ...",
        "  packages: 3 installed.",
    ]


def test_pip_install_shows_progress_and_still_fails_when_pip_fails(tmp_path):
    # A stand-in for the venv's python: pip's output, then pip's failure.
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{PIP_OUTPUT}EOF\necho 'ERROR: No matching distribution' >&2\nexit 1\n")
    fake.chmod(0o755)
    failed = sourced(f'PY="{fake}"; pip_install -r requirements.txt; echo "not reached"')
    assert failed.returncode == 1 and "not reached" not in failed.stdout
    assert "packages: 3 installed." in failed.stderr and "ERROR: No matching distribution" in failed.stderr


def wait_for_server(url: str, seconds: int) -> subprocess.CompletedProcess:
    """The script's own wait, run by sourcing it."""
    return sourced(f'wait_for_server "{url}" {seconds}')


class Redirect(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(302)  # the home page sends a visitor to the login page
        self.send_header("Location", "/login/")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_url_waits_until_the_server_answers(unused_port):
    server = ThreadingHTTPServer(("127.0.0.1", unused_port), Redirect)
    # The server comes up a second after the wait begins, as the web server does after its processes load Django.
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
    lines = first.getvalue().splitlines()
    # Two projects, a line each, saying what each holds and how much of it is ready to label.
    assert [line.split(" (")[0] for line in lines] == ["Demo project gsm8k-demo", "Demo project math-demo"]
    assert all("solutions imported" in line and "ready to label" in line for line in lines)
    assert "already" not in first.getvalue()

    again = io.StringIO()
    call_command("seed_demo", problems=8, stdout=again)
    assert again.getvalue().count("already") == 2, again.getvalue()
    assert Solution.objects.count() == n


class Output:
    """A process's output lines as they come, read by a thread so a test can wait with a bound."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self.thread = threading.Thread(target=lambda: self.lines.extend(stream), daemon=True)
        self.thread.start()

    def wait_for(self, text: str, seconds: float, process: subprocess.Popen) -> None:
        deadline = time.monotonic() + seconds
        while not any(text in line for line in self.lines):
            assert process.poll() is None, f"./stepwise ended ({process.returncode}):\n{self.text}"
            assert time.monotonic() < deadline, f"no {text!r} within {seconds} s:\n{self.text}"
            time.sleep(0.2)

    @property
    def text(self) -> str:
        return "".join(self.lines)


def started_by_run(data_dir: Path) -> dict[int, str]:
    """Live processes started by a `run` on this data dir: each inherits STEPWISE_DATA_DIR, whatever
    its parent became (an orphan's is init). A zombie has no environment left and is not running."""
    marker = f"STEPWISE_DATA_DIR={data_dir}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def start_run(tmp_path: Path, port: int, *args: str) -> tuple[subprocess.Popen, Output]:
    env = fresh_shell_env(tmp_path)
    env["PORT"] = str(port)
    process = subprocess.Popen([str(SCRIPT), "run", *args], cwd=ROOT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=as_from_a_terminal)
    return process, Output(process.stdout)


def as_from_a_terminal() -> None:
    """The signal state a shell started from a terminal has. A child inherits ignored and
    blocked signals, and bash cannot trap a signal ignored when it started: a library in this
    test process that ignores SIGINT (one in the full run does) would leave Ctrl-C untested."""
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def stop_leftovers(process: subprocess.Popen, data_dir: Path) -> None:
    """After a failed test: nothing it started may outlive it."""
    for pid in [process.pid, *started_by_run(data_dir)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(timeout=10)


def get(url: str) -> int:
    try:
        return urllib.request.urlopen(url, timeout=5).status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.slow
def test_run_says_each_stage_answers_and_ctrl_c_stops_everything_within_10_seconds(tmp_path, unused_port):
    began = time.monotonic()
    process, output = start_run(tmp_path, unused_port)
    try:
        # The model's set-up is started once the page answers, and takes far longer than a stop.
        output.wait_for("Default model: setting up in the background", 300, process)
        ready = re.search(r"Stepwise is ready in (\d+) s:  http://127.0.0.1:(\d+)/", output.text)
        assert ready and int(ready[2]) == unused_port, output.text
        assert int(ready[1]) <= time.monotonic() - began + 1
        for stage in ("Python packages: ", "Database: migrations applied.", "Demo project gsm8k-demo",
                      "Demo project math-demo", "Starting the web server"):
            assert stage in output.text
        assert get(f"http://127.0.0.1:{unused_port}/accounts/login/") == 200
        assert '"GET /accounts/login/ HTTP/1.1" 200' in (tmp_path / "logs" / "web.log").read_text()  # access log
        running = started_by_run(tmp_path)
        assert any("-m infra.web_server" in cmd for cmd in running.values()), running
        assert any("init_default_model" in cmd for cmd in running.values()), running

        process.send_signal(signal.SIGINT)
        stopped_at = time.monotonic()
        while started_by_run(tmp_path) and time.monotonic() - stopped_at < 10:
            time.sleep(0.1)
        assert started_by_run(tmp_path) == {}, output.text
        assert process.wait(timeout=1) == 0
        output.thread.join(timeout=5)
        assert output.lines[-1] == "Stepwise stopped.\n", output.text
        assert "stopped by itself" not in output.text and "exit status" not in output.text
    finally:
        stop_leftovers(process, tmp_path)


@pytest.mark.slow
def test_run_no_demo_adds_no_demo_and_stops_cleanly_while_still_starting(tmp_path, unused_port):
    process, output = start_run(tmp_path, unused_port, "--no-demo")
    try:
        output.wait_for("Demo accounts and pool: left out (--no-demo).", 300, process)
        process.send_signal(signal.SIGINT)  # mid-way through the stages: nothing has started yet
        assert process.wait(timeout=30) == 0
        output.thread.join(timeout=5)
        assert output.lines[-1] == "Stepwise stopped.\n" and "Demo project" not in output.text, output.text
        assert started_by_run(tmp_path) == {}
    finally:
        stop_leftovers(process, tmp_path)
    count = "from annotate.models import Solution; from django.contrib.auth.models import User; " \
            "print(Solution.objects.count(), User.objects.count())"
    counted = stepwise("manage", "shell", "--no-imports", "-c", count, env=fresh_shell_env(tmp_path))
    assert counted.stdout.split() == ["0", "0"], counted.stderr


def test_run_refuses_an_unknown_option(tmp_path):
    refused = stepwise("run", "--demo-only", env=fresh_shell_env(tmp_path))
    assert refused.returncode == 2 and "usage: ./stepwise run [--no-demo]" in refused.stderr
