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


@pytest.mark.parametrize("solution", [{"steps": ["5"]}, {"completion": "2 + 3 = 5.\n\n# Answer\n\n5"}])
def test_without_a_worker_the_endpoint_answers_503_within_its_timeout(client, settings, solution):
    settings.STEPWISE_SCORE_API_TIMEOUT = 1.0
    started = time.monotonic()
    response = client.post("/api/score", {"problem": "What is 2 + 3?", **solution}, format="json")
    assert response.status_code == 503
    assert "no scoring worker answered within 1 s" in response.json()["detail"]
    assert time.monotonic() - started < 5
