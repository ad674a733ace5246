"""POST /api/score when no ml worker runs: a clear 503 after a bounded wait, never a hang."""
import time

import pytest
from rest_framework.test import APIClient

from bench.tiny import build_tiny_prm
from scoring.store import registry


@pytest.fixture
def client(reviewer, tmp_path):
    registry.register_model_version(name="tiny", path=build_tiny_prm(tmp_path / "tiny"), make_current=True)
    api = APIClient()
    api.force_login(reviewer)
    return api


def test_without_a_worker_the_endpoint_answers_503_within_its_timeout(client, settings):
    settings.STEPWISE_SCORE_API_TIMEOUT = 1.0
    started = time.monotonic()
    response = client.post("/api/score", {"problem": "What is 2 + 3?", "steps": ["5"]}, format="json")
    assert response.status_code == 503
    assert "no scoring worker answered within 1 s" in response.json()["detail"]
    assert time.monotonic() - started < 5
