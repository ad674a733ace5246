"""The embedded broker (no REDIS_URL) names a host, so kombu's connections log no warning:
without one, every worker start opened with "No hostname was supplied"."""
import pytest

from tests.config.test_settings import start_django

pytestmark = pytest.mark.embedded


def test_the_file_system_broker_connects_without_a_warning(tmp_path):
    connect = (
        "import logging; logging.basicConfig(); from config.celery import app; "
        "connection = app.connection_for_write(); connection.clone(); print(connection.as_uri())"
    )
    started = start_django(tmp_path, connect, REDIS_URL="", CELERY_BROKER_URL="")
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("filesystem://")
    assert "WARNING" not in started.stderr and "No hostname" not in started.stderr
