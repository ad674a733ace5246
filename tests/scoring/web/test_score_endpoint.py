"""POST /api/score: per-step probabilities from the current or a named model, bounded batches.

The scores are computed by a real ml worker process (one for the module: a worker per
test would spend most of the run starting up); requests refused before scoring need none.
"""
import shutil

import pytest
from rest_framework.test import APIClient

from bench import simulation_pool
from bench.tiny import build_tiny_prm
from scoring.core.training_data import LabeledRow
from scoring.models import SolutionScore
from scoring.rescoring import ensemble, scores
from scoring.rescoring import rescore as scoring
from scoring.store import registry
from scoring.web.api.serializers import MAX_ITEMS, MAX_TOTAL_TEXT
from steps.limits import MAX_STEP_CHARS, MAX_STEPS
from steps.splitting import split_steps
from tests.conftest import WorkerProcess
from tests.factories import ProblemFactory, SolutionFactory

PROBLEM = "What is 12 + 7?"
STEPS = ["First add the ones: 2 + 7 = 9.", "Then the tens: 10. So 12 + 7 = 19.", "# Answer\n\n19"]
# The same solution as one text, as an RL policy writes it: the server splits it.
COMPLETION = "\n\n".join(STEPS)


@pytest.fixture(scope="module")
def ml_worker(django_db_setup, django_db_blocker, tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STEPWISE_SCORING_DTYPE", "float32")
        worker = WorkerProcess(tmp_path_factory.mktemp("worker") / "worker.log")
        worker.start()
    yield worker
    worker.stop()


@pytest.fixture
def scoring_worker(ml_worker, transactional_db):
    """The worker, with the test's rows committed so that it can read them."""
    return ml_worker


@pytest.fixture
def tiny_models(db, tmp_path, settings):
    """A distributional (beta) head as the current model and a point head by name."""
    settings.STEPWISE_SCORING_DTYPE = "float32"
    registry.forget_loaded()
    beta = registry.register_model_version(
        name="tiny-beta", path=build_tiny_prm(tmp_path / "beta", kind="head", head_type="beta"), make_current=True
    )
    point = registry.register_model_version(
        name="tiny-point", path=build_tiny_prm(tmp_path / "point", kind="head", head_type="point", seed=3)
    )
    forget_ensembles(beta, point)  # the worker reads them from the data dir: none left by an earlier run
    yield beta, point
    forget_ensembles(beta, point)
    registry.forget_loaded()


def forget_ensembles(*versions):
    for version in versions:
        shutil.rmtree(ensemble.store_dir(version), ignore_errors=True)


@pytest.fixture
def point_with_ensemble(tiny_models, tmp_path, settings):
    """The point head with a stored 4-member ensemble, fitted on labeled synthetic solutions."""
    _, point = tiny_models
    settings.FEATURE_CACHE_DIR = tmp_path / "feature-cache"
    problems, _ = simulation_pool.make_problems(pool="synthetic", data=None, n_pool=8, n_heldout=0)
    rows = []
    for problem_id, problem in enumerate(problems):
        for solution in problem.solutions:
            ratings = simulation_pool.known_ratings(len(solution.steps), solution.first_error)
            rows.append(LabeledRow(len(rows), problem_id, problem.statement, tuple(solution.steps),
                                   (tuple(ratings) + (None,) * (len(solution.steps) - len(ratings)),)))
    return point, ensemble.fitted_for_version(point, rows, members=4)


@pytest.fixture
def client(reviewer):
    api = APIClient()
    api.force_login(reviewer)
    return api


def test_one_solution_gets_p_mean_and_sigma_per_step_from_the_current_model(scoring_worker, client, tiny_models):
    beta, _ = tiny_models
    response = client.post("/api/score", {"problem": PROBLEM, "steps": STEPS}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["model"] == "tiny-beta" and len(body["steps"]) == len(STEPS)
    direct = scoring.score_texts(items=[(PROBLEM, STEPS)], model_version=beta)[0]
    assert body["steps"] == pytest.approx(direct)
    for step in body["steps"]:
        assert 0.0 <= step["p"] <= 1.0 and step["sigma"] is not None and step["sigma"] > 0
        assert step["spread"] is None  # this version has no ensemble yet


def test_a_batch_is_scored_in_order_by_the_named_model(scoring_worker, client, tiny_models):
    _, point = tiny_models
    items = [{"problem": PROBLEM, "steps": STEPS[:n]} for n in (1, 3, 2)]
    body = client.post("/api/score", {"items": items, "model": "tiny-point"}, format="json").json()
    assert body["model"] == "tiny-point"
    assert [len(item["steps"]) for item in body["items"]] == [1, 3, 2]
    direct = scoring.score_texts(items=[(i["problem"], i["steps"]) for i in items], model_version=point)
    assert [item["steps"] for item in body["items"]] == [pytest.approx(d) for d in direct]
    assert all(step["sigma"] is None for item in body["items"] for step in item["steps"])


def test_the_solution_score_sent_is_the_one_rescoring_stores_for_the_same_solution(scoring_worker, client,
                                                                                    tiny_models):
    beta, _ = tiny_models
    solution = SolutionFactory(problem=ProblemFactory(statement=PROBLEM), steps=STEPS)
    scores.score_solutions(model_version=beta, solution_ids=[solution.pk])
    stored = SolutionScore.objects.get(solution=solution, model_version=beta)
    stored = {field: getattr(stored, field) for field in ("product", "min", "last", "mean", "sigma")}
    single = client.post("/api/score", {"problem": PROBLEM, "steps": STEPS}, format="json").json()
    assert single["score"] == pytest.approx(stored, abs=1e-5) and stored["sigma"] is not None
    batch = client.post("/api/score", {"items": [{"problem": PROBLEM, "steps": STEPS}]}, format="json").json()
    assert batch["items"][0]["score"] == pytest.approx(stored, abs=1e-5)


def test_each_step_gets_the_ensembles_spread_beside_its_probability(scoring_worker, client, point_with_ensemble):
    point, fitted = point_with_ensemble
    items = [{"problem": PROBLEM, "steps": STEPS[:n]} for n in (3, 1)]
    body = client.post("/api/score", {"items": items, "model": "tiny-point"}, format="json").json()
    pairs = [(i["problem"], i["steps"]) for i in items]
    # What the stored heads give on the features they were fitted on (the feature cache's).
    where = ensemble.feature_source(point)
    features = where["cache"].features(where["backbone"], pairs, layer=where["layer"], backbone_id=where["backbone_id"])
    expected = [fitted.ensemble.spread(h) for h in features]
    assert [[step["spread"] for step in item["steps"]] for item in body["items"]] == [
        pytest.approx(row) for row in expected]
    assert all(step["spread"] > 0 for item in body["items"] for step in item["steps"])
    # The probabilities are the head's, as without an ensemble.
    direct = scoring.score_texts(items=pairs, model_version=point)
    assert [[s["p"] for s in item["steps"]] for item in body["items"]] == [
        pytest.approx([s["p"] for s in d]) for d in direct]


def test_a_corrupt_stored_ensemble_gives_a_null_spread_not_an_error(scoring_worker, client, point_with_ensemble):
    point, _ = point_with_ensemble
    (ensemble.store_dir(point) / ensemble.ENSEMBLE_FILE).write_bytes(b"\x00garbage")
    response = client.post("/api/score", {"problem": PROBLEM, "steps": STEPS, "model": "tiny-point"}, format="json")
    assert response.status_code == 200, response.content
    assert [step["spread"] for step in response.json()["steps"]] == [None] * len(STEPS)


def test_a_batch_beyond_the_limit_is_refused_with_a_clear_400(client, tiny_models):
    items = [{"problem": PROBLEM, "steps": STEPS}] * (MAX_ITEMS + 1)
    response = client.post("/api/score", {"items": items}, format="json")
    assert response.status_code == 400
    assert f"no more than {MAX_ITEMS}" in str(response.json()["items"])


def test_too_much_text_in_one_call_is_refused(client, tiny_models):
    items = [{"problem": PROBLEM, "steps": ["x" * MAX_STEP_CHARS] * 10}] * (MAX_TOTAL_TEXT // (10 * MAX_STEP_CHARS) + 1)
    response = client.post("/api/score", {"items": items}, format="json")
    assert response.status_code == 400 and f"at most {MAX_TOTAL_TEXT}" in str(response.json())


def test_a_completion_is_split_by_the_servers_splitter_and_scored_as_those_steps(scoring_worker, client,
                                                                                 tiny_models):
    beta, _ = tiny_models
    for mode in ("auto", "blank_line", "line", "sentence"):
        steps = split_steps(COMPLETION, mode)
        body = client.post("/api/score", {"problem": PROBLEM, "completion": COMPLETION, "split": mode},
                           format="json").json()
        assert [step["text"] for step in body["steps"]] == steps  # what the client shows as the steps
        if mode != "sentence":  # A completion in PRM800K's shape gets PRM800K's steps, its answer block one.
            assert steps == STEPS
        direct = scoring.score_texts(items=[(PROBLEM, steps)], model_version=beta)[0]
        assert [{k: v for k, v in step.items() if k != "text"} for step in body["steps"]] == pytest.approx(direct)
        by_steps = client.post("/api/score", {"problem": PROBLEM, "steps": steps}, format="json").json()
        assert body["score"] == pytest.approx(by_steps["score"])


def test_a_batch_mixes_steps_and_completions_and_only_split_ones_carry_texts(scoring_worker, client, tiny_models):
    _, point = tiny_models
    items = [{"problem": PROBLEM, "steps": STEPS}, {"problem": PROBLEM, "completion": COMPLETION},
             {"problem": PROBLEM, "completion": COMPLETION, "split": "lines"}]  # check_mode's old name
    response = client.post("/api/score", {"items": items, "model": "tiny-point"}, format="json")
    assert response.status_code == 200, response.content
    answered = response.json()["items"]
    split = [split_steps(COMPLETION, "auto"), split_steps(COMPLETION, "line")]
    assert [[step.get("text") for step in item["steps"]] for item in answered] == [[None] * len(STEPS), *split]
    direct = scoring.score_texts(items=[(PROBLEM, STEPS), *((PROBLEM, steps) for steps in split)], model_version=point)
    assert [[step["p"] for step in item["steps"]] for item in answered] == [
        pytest.approx([step["p"] for step in steps]) for steps in direct]


@pytest.mark.parametrize("mode", ["paragraph", "explicit", ""])
def test_a_bad_split_mode_is_a_400_naming_split(client, tiny_models, mode):
    single = client.post("/api/score", {"problem": PROBLEM, "completion": COMPLETION, "split": mode}, format="json")
    assert single.status_code == 400 and "split" in single.json()
    items = [{"problem": PROBLEM, "steps": STEPS}, {"problem": PROBLEM, "completion": COMPLETION, "split": mode}]
    batch = client.post("/api/score", {"items": items}, format="json")
    assert batch.status_code == 400 and "split" in batch.json()["items"][1]


def test_a_completion_is_held_to_the_limits_of_sent_steps(client, tiny_models):
    too_many = "\n\n".join(f"Step {n} is done." for n in range(MAX_STEPS + 1))
    assert len(split_steps(too_many)) == MAX_STEPS + 1
    response = client.post("/api/score", {"problem": PROBLEM, "completion": too_many}, format="json")
    assert response.status_code == 400 and f"1 to {MAX_STEPS}" in str(response.json()["completion"])

    too_long = "Start.\n\n" + "x" * (MAX_STEP_CHARS + 1)
    items = [{"problem": PROBLEM, "completion": COMPLETION}, {"problem": PROBLEM, "completion": too_long}]
    response = client.post("/api/score", {"items": items}, format="json")
    assert response.status_code == 400
    assert response.json()["items"][0] == {}
    assert f"at most {MAX_STEP_CHARS}" in str(response.json()["items"][1]["completion"])

    # A completion counts whole against the request's total, before any splitting.
    items = [{"problem": PROBLEM, "completion": "x" * (MAX_TOTAL_TEXT // 2)}] * 2
    response = client.post("/api/score", {"items": items}, format="json")
    assert response.status_code == 400 and f"at most {MAX_TOTAL_TEXT}" in str(response.json())


@pytest.mark.parametrize("body, field", [
    ({"problem": PROBLEM}, "steps"),
    ({"problem": PROBLEM, "steps": []}, "steps"),
    ({"problem": "   ", "steps": STEPS}, "problem"),
    ({"problem": PROBLEM, "steps": ["ok", " "]}, "steps"),
    ({"problem": PROBLEM, "steps": STEPS, "model": "no-such-model"}, "model"),
    ({"items": [{"problem": PROBLEM}]}, "items"),
    ({"problem": PROBLEM, "completion": " \n\n "}, "completion"),
    ({"problem": PROBLEM, "completion": COMPLETION, "steps": STEPS}, "completion"),
    ({"problem": PROBLEM, "steps": STEPS, "split": "line"}, "split"),
    ({"completion": COMPLETION}, "problem"),
    ({"items": [{"problem": PROBLEM, "completion": ""}]}, "items"),
])
def test_bad_requests_name_the_field(client, tiny_models, body, field):
    response = client.post("/api/score", body, format="json")
    assert response.status_code == 400
    assert field in response.json()


def test_both_single_and_batch_forms_at_once_are_refused(client, tiny_models):
    response = client.post("/api/score", {"problem": PROBLEM, "steps": STEPS, "items": []}, format="json")
    assert response.status_code == 400


@pytest.mark.django_db
def test_without_any_model_the_endpoint_answers_503(client):
    response = client.post("/api/score", {"problem": PROBLEM, "steps": STEPS}, format="json")
    assert response.status_code == 503 and "model" in response.json()["detail"]


def test_annotators_may_not_score(annotator, tiny_models):
    api = APIClient()
    api.force_login(annotator)
    assert api.post("/api/score", {"problem": PROBLEM, "steps": STEPS}, format="json").status_code == 403


def test_a_model_whose_files_changed_answers_503_from_the_worker(scoring_worker, client, tiny_models):
    from scoring.core.prm import StepHead

    beta, _ = tiny_models
    StepHead(32, "beta").save(beta.path)
    response = client.post("/api/score", {"problem": PROBLEM, "steps": STEPS}, format="json")
    assert response.status_code == 503 and "changed" in response.json()["detail"]
