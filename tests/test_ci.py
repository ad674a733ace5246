"""Under CI=true a run cannot pass by skipping (tests/ci.py), seen from a pytest run of its own."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND")


def run_pytest(tmp_path: Path, *args: str, **env: str) -> tuple[int, str]:
    """Run pytest in a child process with the repository's settings, its own data dir and `env`."""
    child_env = {k: v for k, v in os.environ.items() if k not in ("CI", "STEPWISE_EMBEDDED_RUN", *SERVICES)}
    child_env |= {"STEPWISE_DATA_DIR": str(tmp_path / "data"), **env}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), "--rootdir", str(REPO_ROOT),
         "-p", "no:cacheprovider", "-q", *args],
        cwd=REPO_ROOT, env=child_env, capture_output=True, text=True, timeout=300,
    )
    return result.returncode, result.stdout + result.stderr


def child_tests(tmp_path: Path, source: str) -> str:
    path = tmp_path / "test_child.py"
    path.write_text(source)
    return str(path)

SKIPPING = """
import pytest

def test_a_part_that_does_not_run():
    pytest.skip("no tool for it here")

@pytest.mark.postgresql
def test_a_postgresql_only_part():
    pass
"""


@pytest.mark.slow
def test_outside_ci_skips_stay_skips(tmp_path):
    code, output = run_pytest(tmp_path, child_tests(tmp_path, SKIPPING))
    assert code == 0, output
    assert "2 skipped" in output and "needs PostgreSQL" in output


@pytest.mark.slow
def test_under_ci_a_skipped_test_fails_the_run_with_its_reason(tmp_path):
    # The embedded rerun is held to this rule too (it only leaves the postgresql tests out).
    code, output = run_pytest(tmp_path, child_tests(tmp_path, SKIPPING), CI="true", STEPWISE_EMBEDDED_RUN="1")
    assert code == 1, output
    # The skip in the test body fails it; the one in its setup (the marker) is an error.
    assert "1 failed, 1 error in" in output
    assert "skipped under CI=true, which fails the run: no tool for it here" in output
    assert "skipped under CI=true, which fails the run: needs PostgreSQL" in output


@pytest.mark.slow
def test_under_ci_missing_chromium_postgresql_and_redis_stop_the_run_naming_each(tmp_path):
    code, output = run_pytest(
        tmp_path, child_tests(tmp_path, "def test_nothing():\n    pass\n"), CI="true",
        STEPWISE_CHROMIUM=str(tmp_path / "no-chromium"),
        DATABASE_URL="postgres://postgres@127.0.0.1:9/nowhere", REDIS_URL="redis://127.0.0.1:9/0",
    )
    assert code == pytest.ExitCode.USAGE_ERROR, output
    assert "CI=true, but this run would skip parts of the suite" in output
    assert "PostgreSQL at DATABASE_URL is unreachable" in output
    assert "Redis at REDIS_URL is unreachable" in output
    assert f"no Chromium at {tmp_path / 'no-chromium'}" in output
    assert "1 passed" not in output


@pytest.mark.slow
def test_under_ci_the_embedded_database_is_not_enough(tmp_path):
    code, output = run_pytest(tmp_path, child_tests(tmp_path, "def test_nothing():\n    pass\n"), CI="true")
    assert code == pytest.ExitCode.USAGE_ERROR, output
    assert "DATABASE_URL is not a PostgreSQL URL" in output and "REDIS_URL is not set" in output


@pytest.mark.slow
def test_the_summary_counts_the_real_worker_tests_that_passed(tmp_path):
    code, output = run_pytest(tmp_path, "tests/config/test_worker.py::test_real_worker_process_executes_a_task")
    assert code == 0, output
    assert "browser: 0 passed, postgresql: 0 passed, real worker: 1 passed" in output


@pytest.mark.postgresql
def test_under_ci_a_run_without_browser_postgresql_or_worker_tests_fails(tmp_path):
    from django.conf import settings

    db = settings.DATABASES["default"]
    code, output = run_pytest(
        tmp_path, child_tests(tmp_path, "def test_nothing():\n    pass\n"), CI="true",
        STEPWISE_CHROMIUM=sys.executable,  # the check is for an executable; no browser test runs here
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/unused",
        REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
    )
    assert code == pytest.ExitCode.TESTS_FAILED, output
    assert "1 passed" in output
    assert "CI=true and no browser / postgresql / real worker test passed: the run fails." in output
