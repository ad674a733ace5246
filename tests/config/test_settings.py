"""Every STEPWISE_* setting is parsed at start-up: a bad value stops the process, naming it."""
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.embedded


def start_django(tmp_path, then: str = "", **variables: str) -> subprocess.CompletedProcess:
    """`django.setup()` in a fresh process with these variables, as a web or worker start would."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "SECRET_KEY": "x",
           "STEPWISE_DATA_DIR": str(tmp_path), **variables}
    code = f"import django; django.setup(); from django.conf import settings; {then}"
    return subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_misspelled_selection_share_stops_start_up_naming_the_variable(tmp_path):
    started = start_django(tmp_path, STEPWISE_SELECTION_SHARES="convincing_wrongg=1")
    assert started.returncode != 0
    assert "ImproperlyConfigured" in started.stderr
    assert "STEPWISE_SELECTION_SHARES" in started.stderr and "'convincing_wrongg'" in started.stderr


@pytest.mark.parametrize("name, value, message", [
    ("STEPWISE_SELECTION_SHARES", "random=abc", "is not a number"),
    ("STEPWISE_QUEUE_SIZE", "lots", "is not an integer"),
    ("STEPWISE_QUEUE_SIZE", "0", "must be at least 1"),
    ("STEPWISE_RESCORE_CHUNK_SIZE", "-4", "must be at least 1"),
    ("STEPWISE_GRADING_TIMEOUT", "soon", "is not a number"),
    ("STEPWISE_SCORING_DTYPE", "float8", "use auto"),
    ("STEPWISE_ALLOW_TRUST_REMOTE_CODE", "maybe", "is not a boolean"),
    ("STEPWISE_JUDGE_PROMPT", "Judge {problem}", "must contain {steps}"),
])
def test_bad_values_stop_start_up_naming_the_variable(tmp_path, name, value, message):
    started = start_django(tmp_path, **{name: value})
    assert started.returncode != 0
    assert f"ImproperlyConfigured: {name}" in started.stderr and message in started.stderr


def test_good_values_start_and_the_shares_arrive_parsed(tmp_path):
    started = start_django(tmp_path, "print(settings.STEPWISE_SELECTION_SHARES, settings.STEPWISE_QUEUE_SIZE)",
                           STEPWISE_SELECTION_SHARES="random=1, convincing=3", STEPWISE_QUEUE_SIZE="20")
    assert started.returncode == 0, started.stderr
    assert started.stdout.split() == ["{'random':", "0.25,", "'convincing':", "0.75}", "20"]


def test_the_filesystem_broker_keeps_its_control_folder_in_the_data_dir(tmp_path):
    env = {"REDIS_URL": "", "CELERY_BROKER_URL": ""}
    started = start_django(tmp_path, "print(settings.CELERY_BROKER_TRANSPORT_OPTIONS['control_folder'])", **env)
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == str(tmp_path.resolve() / "broker" / "control")
    assert not (REPO_ROOT / "control").exists()
