"""Every process the tests start ends with the run, also when the run is stopped by a signal
(tests/processes.py), seen from pytest runs of their own."""
import os
import signal
import time

import pytest

from tests.processes import descendants
from tests.test_ci import child_tests, run_pytest

STOPPED_MID_TEST = """
import os, pathlib, signal, subprocess

def test_starts_a_server_and_an_orphan_then_the_run_is_stopped():
    server = subprocess.Popen(["sleep", "600"], start_new_session=True)
    # A launcher that leaves its child behind, as a daemonizing server does: the child's parent dies.
    launched = subprocess.run(["bash", "-c", "setsid sleep 600 >/dev/null 2>&1 & echo $!"],
                              capture_output=True, text=True, check=True)
    pathlib.Path(os.environ["PIDS_FILE"]).write_text(f"{server.pid} {launched.stdout.strip()}")
    os.kill(os.getpid(), signal.SIGTERM)  # as a stopped CI job is stopped
"""


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def stopped_run(tmp_path, *options: str) -> tuple[int, str, list[int]]:
    """(exit code, output, the pids the child run's test started) of a run stopped by SIGTERM."""
    pids_file = tmp_path / "pids"
    code, output = run_pytest(tmp_path, child_tests(tmp_path, STOPPED_MID_TEST), *options,
                              PIDS_FILE=str(pids_file))
    return code, output, [int(pid) for pid in pids_file.read_text().split()]


@pytest.mark.slow
def test_a_run_stopped_by_sigterm_leaves_no_process_it_started(tmp_path):
    code, output, pids = stopped_run(tmp_path)
    # Stopped as Ctrl-C stops it: the fixtures' teardown ran, and the run says why it ended.
    assert code != 0 and "KeyboardInterrupt" in output and "stopped by SIGTERM" in output, output
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running(pid) for pid in pids), output


@pytest.mark.slow
def test_without_the_plugin_the_same_run_leaves_both_behind(tmp_path):
    code, _, pids = stopped_run(tmp_path, "-p", "no:tests.processes")
    try:
        assert code == -signal.SIGTERM  # killed on the spot
        assert all(running(pid) for pid in pids)
    finally:
        for pid in pids:
            os.killpg(pid, signal.SIGKILL)


def test_descendants_are_found_below_a_process_and_not_beside_it():
    import subprocess

    child = subprocess.Popen(["bash", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 5
        while len(descendants(child.pid)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        below = descendants(child.pid)
        assert len(below) == 1 and below[0] in descendants()
        assert os.getpid() not in descendants()
    finally:
        child.kill()
        child.wait()
        for pid in below:
            os.kill(pid, signal.SIGKILL)
