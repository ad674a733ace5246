"""A real Celery worker process consumes from the configured broker."""
import pytest

from annotate.tasks import ping_task


@pytest.mark.embedded
def test_real_worker_process_executes_a_task(celery_worker_process):
    result = ping_task.delay("hello")
    assert result.get(timeout=60) == "hello"
