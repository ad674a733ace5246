"""Every process the tests start ends with the run, however the run ends (a pytest plugin:
`-p tests.processes` in pytest.ini).

Tests start servers and workers in sessions of their own (so a stop reaches their children), and
each fixture stops what it started. That holds when the run ends by itself or by Ctrl-C, which
pytest turns into the fixtures' teardown; it did not when the run was stopped otherwise:

- SIGTERM or SIGHUP (a stopped CI job, a closed terminal) ended pytest at once, no teardown run,
  and a test's Celery worker stayed. Here they are turned into the KeyboardInterrupt of Ctrl-C,
  so every fixture's teardown runs.
- A process whose parent died (a child pytest killed at its timeout, a server's launcher) was
  adopted by init and ran on unseen, for minutes. This process is made a child subreaper, so
  such orphans are adopted by it instead, and when the session ends whatever still runs below it
  is stopped: SIGTERM to it and its process group, SIGKILL after a grace period.
"""
from __future__ import annotations

import ctypes
import os
import signal
import time

import psutil

GRACE_SECONDS = 5.0
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def pytest_configure(config):
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: orphans go to init as before
        pass


def pytest_unconfigure(config):
    stop_descendants()


def descendants(pid: int | None = None) -> list[int]:
    """The processes still running below `pid` (this one by default), children before theirs."""
    found = []
    for process in psutil.Process(pid or os.getpid()).children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def stop_descendants() -> list[int]:
    """SIGTERM everything still running below this process (each group it leads too), SIGKILL
    what is left after GRACE_SECONDS; returns the pids that were running."""
    running = descendants()
    for pid in running:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < deadline and descendants():
        _reap()
        time.sleep(0.1)
    for pid in descendants():
        _signal(pid, signal.SIGKILL)
    _reap()
    return running


def _signal(pid: int, signum: int) -> None:
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _reap() -> None:
    """Collect the exit of adopted orphans (a subreaper's duty), and of our own children."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
