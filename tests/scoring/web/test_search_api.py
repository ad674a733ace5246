"""POST /api/search: a PRM-guided search run by a real ml worker, within the budget it was given.

The tiny BetaPRM's folder holds a causal tiny Llama, so the worker's default generator (a
local model on the PRM's own backbone) is real too. One worker for the module.
"""
import pytest
from django.core.cache import caches
from rest_framework.test import APIClient

from bench.tiny import build_tiny_prm
from scoring.store import registry
from scoring.web.api.serializers import SEARCH_METHODS
from tests.conftest import WorkerProcess

PROBLEM = "What is 12 + 7?"
SMALL_STEPS = {"max_step_tokens": 6, "max_steps": 3, "seed": 0}


@pytest.fixture(scope="module")
def ml_worker(django_db_setup, django_db_blocker, tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STEPWISE_SCORING_DTYPE", "float32")
        patch.setenv("OMP_NUM_THREADS", "1")  # tiny models: thread hand-offs cost more than the maths
        worker = WorkerProcess(tmp_path_factory.mktemp("worker") / "worker.log")
        worker.start()
    yield worker
    worker.stop()


@pytest.fixture
def search_worker(ml_worker, transactional_db):
    return ml_worker


@pytest.fixture
def tiny_beta(db, tmp_path, settings):
    settings.STEPWISE_SCORING_DTYPE = "float32"
    return registry.register_model_version(
        name="tiny-beta", path=build_tiny_prm(tmp_path / "beta", kind="head", head_type="beta"), make_current=True
    )


@pytest.fixture
def client(reviewer):
    caches["throttle"].clear()
    api = APIClient()
    api.force_login(reviewer)
    return api


def search(client, method, budget, **options):
    return client.post("/api/search", {"problem": PROBLEM, "method": method, "budget": budget,
                                       "options": {**SMALL_STEPS, **options}}, format="json")


@pytest.mark.parametrize("method, options", [
    ("beam", {"beam_width": 2, "expansions": 2}),
    ("mcts", {"simulations": 4, "expansion_width": 2}),
    ("aca", {"n0": 2, "n_total": 4, "m": 2, "max_solution_tokens": 10}),
    ("best_of_n", {"n": 3, "max_solution_tokens": 10}),
])
def test_a_search_through_the_worker_returns_its_solution_within_budget(search_worker, client, tiny_beta,
                                                                        method, options):
    response = search(client, method, {"max_tokens": 30, "max_prm_calls": 6}, **options)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["model"] == "tiny-beta" and body["method"] == method
    assert 0 < body["compute"]["generated_tokens"] <= 30 and 0 < body["compute"]["prm_calls"] <= 6
    solution = body["solution"]
    assert solution["steps"] and len(solution["scores"]) == len(solution["steps"])
    assert all(step["sigma"] is not None for step in solution["scores"])


def test_an_option_the_method_does_not_take_is_refused_by_name(search_worker, client, tiny_beta):
    response = search(client, "beam", {"max_tokens": 30}, simulations=4)
    assert response.status_code == 400 and "simulations" in response.json()["options"]


@pytest.mark.parametrize("body, field", [
    ({"problem": PROBLEM, "method": "beam"}, "budget"),
    ({"problem": PROBLEM, "method": "sampling", "budget": {"max_tokens": 10}}, "method"),
    ({"problem": " ", "method": "beam", "budget": {"max_tokens": 10}}, "problem"),
    ({"problem": PROBLEM, "method": "beam", "budget": {"max_tokens": 10 ** 7}}, "budget"),
    ({"problem": PROBLEM, "method": "beam", "budget": {"max_tokens": 10}, "options": {"lookahead": 2}}, "options"),
    ({"problem": PROBLEM, "method": "mcts", "budget": {"max_tokens": 10}, "options": {"simulatons": 4}}, "options"),
])
def test_bad_requests_name_the_field_before_any_worker_is_asked(client, tiny_beta, body, field):
    response = client.post("/api/search", body, format="json")
    assert response.status_code == 400 and field in response.json()


def test_annotators_without_api_rights_get_403(annotator, tiny_beta):
    api = APIClient()
    api.force_login(annotator)
    response = api.post("/api/search", {"problem": PROBLEM, "method": "beam", "budget": {"max_tokens": 10}},
                        format="json")
    assert response.status_code == 403


def test_searches_are_throttled_per_user(client, tiny_beta, settings):
    settings.STEPWISE_SEARCH_RATE = "1/minute"
    body = {"problem": PROBLEM, "method": "beam", "budget": {}}
    assert client.post("/api/search", body, format="json").status_code == 400
    assert client.post("/api/search", body, format="json").status_code == 429


def test_without_a_worker_the_search_answers_503_within_its_timeout(client, tiny_beta, settings):
    settings.STEPWISE_SEARCH_API_TIMEOUT = 1.0
    response = search(client, "beam", {"max_tokens": 10})
    assert response.status_code == 503 and "no search worker answered within 1 s" in response.json()["detail"]


def test_the_api_offers_every_search_method():
    from scoring import search as search_module

    assert set(SEARCH_METHODS) == set(search_module.METHODS)
