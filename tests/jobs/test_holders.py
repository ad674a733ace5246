"""Who holds a claim: a holder process that is gone, even before it is reaped."""
import os
import socket
import subprocess
import sys
from pathlib import Path

from jobs.holders import holder_is_dead
from tests.conftest import wait_for


def test_a_holder_that_exited_but_was_not_yet_reaped_counts_as_dead():
    # A worker killed with -9 leaves its pool process a zombie until someone reaps it (some
    # init processes take their time); signal 0 still reaches a zombie, so /proc must decide.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    holder = f"{socket.gethostname()}:{child.pid}"
    wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z", timeout=20)
    assert holder_is_dead(holder)
    child.wait()  # reaped: gone altogether
    assert holder_is_dead(holder)
    assert not holder_is_dead(f"{socket.gethostname()}:{os.getpid()}")
