"""POST /api/score when no ml worker runs: a clear 503 after a bounded wait, never a hang."""
import threading
import time

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import before_task_publish
from django.db import connection
from rest_framework.test import APIClient

from bench.tiny import build_tiny_prm
from scoring import on_worker
from scoring.store import registry
from scoring.tasks import score_texts_task
from tests.conftest import wait_for


@pytest.fixture
def client(reviewer, tmp_path):
    registry.register_model_version(name="tiny", path=build_tiny_prm(tmp_path / "tiny"), make_current=True)
    api = APIClient()
    api.force_login(reviewer)
    return api


@pytest.mark.parametrize("solution", [{"steps": ["5"]}, {"completion": "2 + 3 = 5.\n\n# Answer\n\n5"}])
def test_without_a_worker_the_endpoint_answers_503_within_its_timeout(client, settings, solution):
    settings.STEPWISE_SCORE_API_TIMEOUT = 1.0
    started = time.monotonic()
    response = client.post("/api/score", {"problem": "What is 2 + 3?", **solution}, format="json")
    assert response.status_code == 503
    assert "no scoring worker answered within 1 s" in response.json()["detail"]
    assert time.monotonic() - started < 5


def fail_with_a_time_limit(backend, task_id):
    backend.mark_as_failure(task_id, SoftTimeLimitExceeded("soft time limit exceeded"))


def expire_before_a_worker_takes_it(backend, task_id):
    backend.mark_as_revoked(task_id, "expired")


@pytest.mark.parametrize(("ending", "detail"), [
    (fail_with_a_time_limit, "scoring failed on the worker: SoftTimeLimitExceeded"),
    (expire_before_a_worker_takes_it, "no scoring worker took the request within 5 s"),
])
def test_a_task_that_ended_without_answering_is_a_503_never_a_500(client, settings, ending, detail):
    """What a worker stores for a task it did not answer, stored in the real result backend as the
    message is sent: the view reads that state, not an answer."""
    settings.STEPWISE_SCORE_API_TIMEOUT = 5.0

    def end_it(headers, **_):
        ending(score_texts_task.backend, headers["id"])

    before_task_publish.connect(end_it, weak=False)
    try:
        started = time.monotonic()
        response = client.post("/api/score", {"problem": "What is 2 + 3?", "steps": ["5"]}, format="json")
    finally:
        before_task_publish.disconnect(end_it)
    assert response.status_code == 503, response.content
    assert detail in response.json()["detail"]
    assert time.monotonic() - started < 4  # the stored ending is read at once, not waited out


@pytest.mark.django_db(transaction=True)  # the first request runs in a thread of its own
def test_past_the_concurrency_limit_a_request_gets_429_at_once_while_the_first_waits_on_the_worker(
    reviewer, tmp_path, settings
):
    settings.STEPWISE_SCORE_CONCURRENCY = 1
    settings.STEPWISE_SCORE_API_TIMEOUT = 3.0
    registry.register_model_version(name="tiny", path=build_tiny_prm(tmp_path / "tiny"), make_current=True)
    body = {"problem": "What is 2 + 3?", "steps": ["5"]}
    first = {}

    def wait_on_the_worker():
        api = APIClient()
        api.force_authenticate(reviewer)
        first["response"] = api.post("/api/score", body, format="json")
        connection.close()  # this thread's own

    thread = threading.Thread(target=wait_on_the_worker)
    thread.start()
    wait_for(lambda: on_worker.waits.count == 1, timeout=20, interval=0.02)
    api = APIClient()
    api.force_authenticate(reviewer)
    started = time.monotonic()
    busy = api.post("/api/score", body, format="json")
    assert busy.status_code == 429 and busy["Retry-After"] == "1"
    assert "STEPWISE_SCORE_CONCURRENCY" in busy.json()["detail"]
    search = api.post("/api/search", {"problem": "What is 2 + 3?", "method": "best_of_n",
                                      "budget": {"max_tokens": 10}}, format="json")
    assert search.status_code == 429  # searches wait in the same places
    assert time.monotonic() - started < 2.0  # answered at once, holding no thread
    thread.join(timeout=30)
    assert first["response"].status_code == 503  # it waited out its timeout: no worker here
    assert on_worker.waits.count == 0
    settings.STEPWISE_SCORE_API_TIMEOUT = 0.2
    assert api.post("/api/score", body, format="json").status_code == 503  # the place is free again
