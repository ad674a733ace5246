"""A test run that cannot pass by skipping (a pytest plugin: `-p tests.ci` in pytest.ini).

A green run used to hide whole parts: browser tests skip without Chromium, PostgreSQL-only
tests skip on SQLite, and without `REDIS_URL` the worker tests run on the file-system broker.
So, under `CI=true`:

- the session does not start unless PostgreSQL (`DATABASE_URL`), Redis (`REDIS_URL`) and
  Chromium are there; it stops with a usage error naming each one that is missing;
- a skipped test is a failure, with the skip's reason;
- the session fails when no browser, no PostgreSQL-only or no real-worker test passed.

Each kind has its marker (`browser`, `postgresql`, `worker`), so the everyday tier
(`./stepwise test --fast`) can leave them out before they run: tests that take the worker
fixtures are marked at collection, and a test that used a kind without its marker fails, naming
the marker to add, so the fast tier never starts a browser or a worker by surprise.

Everywhere, the summary says how many tests of each kind passed. A test counts as a kind
when it used it: it opened a browser page, it is marked `postgresql` (and ran on
PostgreSQL), it started a real worker process. The embedded rerun of `./stepwise test`
(`STEPWISE_EMBEDDED_RUN=1`) goes without PostgreSQL and Redis on purpose: it leaves the
`postgresql` tests out and is held to the first and last rule, not the second.
"""
import os
import shutil
from collections import Counter

import pytest

KINDS = ("browser", "postgresql", "real worker")
MARKERS = {"browser": "browser", "postgresql": "postgresql", "real worker": "worker"}
# Fixtures that start a real Celery worker: a test that takes one is marked `worker` at collection.
WORKER_FIXTURES = {"celery_worker_process", "worker_factory", "worker", "ml_worker", "scoring_app"}
CHROMIUM = os.environ.get("STEPWISE_CHROMIUM", "/usr/bin/chromium")

_used: dict[str, set[str]] = {}  # test node id -> kinds it used
_passed: Counter[str] = Counter()
_current: str | None = None
_missing_kinds: list[str] = []


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def embedded_run() -> bool:
    return os.environ.get("STEPWISE_EMBEDDED_RUN", "") == "1"


def uses(kind: str) -> None:
    """Record that the running test uses `kind` (called by the fixtures that provide it)."""
    assert kind in KINDS, kind
    if _current is not None:
        _used.setdefault(_current, set()).add(kind)


def database_is_postgresql() -> bool:
    from django.db import connection

    return connection.vendor == "postgresql"


def missing_services() -> list[str]:
    """What a CI run needs and does not have, one sentence each."""
    return [problem for problem in (_postgresql_problem(), _redis_problem(), _chromium_problem()) if problem]


def _postgresql_problem() -> str | None:
    from django.conf import settings

    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("postgresql"):
        return f"DATABASE_URL is not a PostgreSQL URL (the database is {db['ENGINE']})"
    import psycopg

    try:
        psycopg.connect(
            dbname="postgres", user=db.get("USER") or None, password=db.get("PASSWORD") or None,
            host=db.get("HOST") or None, port=db.get("PORT") or None, connect_timeout=5,
        ).close()
    except psycopg.Error as error:
        return f"PostgreSQL at DATABASE_URL is unreachable: {str(error).strip()}"
    return None


def _redis_problem() -> str | None:
    url = os.environ.get("REDIS_URL", "")
    if not url.startswith(("redis://", "rediss://")):
        return "REDIS_URL is not set to a Redis URL"
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=5).ping()
    except redis.RedisError as error:
        return f"Redis at REDIS_URL is unreachable: {error}"
    return None


def _chromium_problem() -> str | None:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)) and not shutil.which(CHROMIUM):
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium, or set STEPWISE_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -r requirements-dev.txt)"
    return None


def pytest_sessionstart(session: pytest.Session) -> None:
    if under_ci() and not embedded_run() and (problems := missing_services()):
        raise pytest.UsageError(
            "CI=true, but this run would skip parts of the suite:\n  - " + "\n  - ".join(problems)
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if WORKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.worker)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    global _current
    _current = item.nodeid
    if item.get_closest_marker("postgresql"):
        if not database_is_postgresql():
            pytest.skip("needs PostgreSQL (set DATABASE_URL to a PostgreSQL URL)")
        uses("postgresql")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if under_ci() and report.skipped and not hasattr(report, "wasxfail"):
        _skip_is_failure(report)
    if report.when == "call" and (unmarked := _kinds_used_unmarked(item)):
        report.outcome = "failed"
        report.longrepr = (f"used {', '.join(unmarked)} without its marker: add "
                           + ", ".join(f"@pytest.mark.{MARKERS[kind]}" for kind in unmarked)
                           + " (./stepwise test --fast leaves those tests out)")
    return report


def _kinds_used_unmarked(item: pytest.Item) -> list[str]:
    return [kind for kind in sorted(_used.get(item.nodeid, ())) if not item.get_closest_marker(MARKERS[kind])]


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    if under_ci() and report.skipped:
        _skip_is_failure(report)
    return report


def _skip_is_failure(report: pytest.TestReport | pytest.CollectReport) -> None:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = f"skipped under CI=true, which fails the run: {reason}"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        _passed.update(_used.get(report.nodeid, ()))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if under_ci() and not embedded_run():
        _missing_kinds[:] = [kind for kind in KINDS if not _passed[kind]]
        if _missing_kinds:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    terminalreporter.write_sep("-", "what ran")
    terminalreporter.write_line(", ".join(f"{kind}: {_passed[kind]} passed" for kind in KINDS))
    if _missing_kinds:
        terminalreporter.write_line(
            f"CI=true and no {' / '.join(_missing_kinds)} test passed: the run fails.", red=True, bold=True
        )
