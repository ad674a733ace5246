"""A clone alone passes its tests: a test that opens a file beside the repository fails (a pytest
plugin: `-p tests.outside_reads` in pytest.ini).

Data a test needs lives in the repository (tests/data/); a path into a folder next to the
checkout (`../shared/...`, another checkout) works on one machine and fails on every fresh clone.
An audit hook (PEP 578) sees every `open` of the test process: one under the repository's parent
folder but outside the repository fails the test that made it, naming the path. Child processes
are not watched; `.ci/run` runs the whole suite from a clone with nothing beside it.
"""
import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
_BESIDE = str(REPO_ROOT.parent) + os.sep
# The repository, and the Python environment the tests run in (a virtualenv may sit beside the
# checkout, as STEPWISE_VENV allows): reads there are not data.
_INSIDE = tuple({os.path.abspath(p) + os.sep for p in (REPO_ROOT, sys.prefix, sys.base_prefix, sys.exec_prefix)})

_reads: list[str] = []


def outside_path(path: object) -> str | None:
    """`path` as an absolute string when it lies beside the repository, else None."""
    if isinstance(path, int) or path is None:  # a file descriptor: opened earlier, by path
        return None
    text = os.path.abspath(os.fsdecode(path))  # type: ignore[arg-type]
    if text.startswith(_BESIDE) and not (text + os.sep).startswith(_INSIDE):
        return text
    return None


def _audit(event: str, args: tuple) -> None:
    if event == "open" and (path := outside_path(args[0])):
        caller = sys._getframe(1)  # the Python line that opened it
        _reads.append(f"{path} (opened at {caller.f_code.co_filename}:{caller.f_lineno})")


sys.addaudithook(_audit)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if _reads:  # read in this phase (setup, call or teardown): the phase fails
        paths = sorted(set(_reads))
        _reads.clear()
        report.outcome = "failed"
        report.longrepr = (f"read outside the repository: {', '.join(paths)}; copy what the test needs into "
                           "tests/data/ (tests/data/README.md)")
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # What no test's call phase owned: a module-level read at collection, a fixture's.
    if _reads:
        print(f"\nread outside the repository outside any test: {', '.join(sorted(set(_reads)))}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
