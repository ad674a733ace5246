"""The ensemble in production: fitted once per (model version, labels), stored as safetensors
beside the version's files, reused by every rebuild, refitted when the labels change; the pool's
uncertainties under it computed once per solution."""
import threading

import pytest
import torch

from annotate.models import Project, QueueItem, Solution
from bench import simulation, simulation_pool
from bench.tiny import build_tiny_prm
from scoring.models import ModelVersion, StepScore
from scoring.rescoring import ensemble, label_rows, scores, selection
from scoring.rescoring import rescore as scoring
from scoring.store import registry

DISAGREEMENT = {"disagreement": 1.0}


@pytest.fixture
def version(db, tmp_path, settings):
    settings.FEATURE_CACHE_DIR = tmp_path / "feature-cache"
    settings.ENSEMBLES_DIR = tmp_path / "ensembles"
    settings.STEPWISE_SCORING_DTYPE = "float32"
    registry.forget_loaded()
    yield registry.register_model_version(name="tiny-head", path=build_tiny_prm(tmp_path / "model"))
    registry.forget_loaded()


@pytest.fixture
def labeled_pool(version, annotator):
    """A scored 12-problem pool with 10 solutions labeled through the real queue."""
    problems, _ = simulation_pool.make_problems(pool="synthetic", data=None, n_pool=12, n_heldout=0)
    ids = simulation_pool.write_problems(problems, split="pool", source="tests")
    scores.score_solutions(model_version=version, solution_ids=ids)
    rebuild(version, {"random": 1.0}, size=10)
    assert len(simulation.label_queue(annotator=annotator, limit=10)) == 10
    return ids


@pytest.fixture
def calls(monkeypatch):
    """How often the expensive steps ran: a fit, a pool featurization, a backbone load."""
    counts = {"fit": 0, "pool": 0, "backbone": 0}

    def counting(name, function):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(ensemble, "fit_from_rows", counting("fit", ensemble.fit_from_rows))
    monkeypatch.setattr(ensemble, "pool_uncertainty", counting("pool", ensemble.pool_uncertainty))
    monkeypatch.setattr(ensemble, "feature_source", counting("backbone", ensemble.feature_source))
    return counts


def rebuild(version, shares=DISAGREEMENT, size=4):
    generation = selection.rebuild_queue(
        model_version=version, project=Project.objects.sole(),
        policy=selection.Policy(size=size, shares=shares, per_problem=9, seed=0))
    return list(QueueItem.objects.filter(generation=generation.number).order_by("-priority")
                .values_list("solution_id", "reason"))


def stored_uncertainty_files(version):
    return sorted(ensemble.store_dir(version).glob("uncertainty-*.safetensors"))


def test_the_ensemble_is_fitted_once_and_every_later_rebuild_reuses_it(version, labeled_pool, calls):
    first = rebuild(version)
    assert {reason for _, reason in first} == {"disagreement"}
    assert calls == {"fit": 1, "pool": 1, "backbone": 2}
    stored = ensemble.stored_ensemble(version)
    assert stored is not None and stored.ensemble.weights.shape[0] == ensemble.MEMBERS
    assert (ensemble.store_dir(version) / ensemble.ENSEMBLE_FILE).exists()
    assert len(stored_uncertainty_files(version)) == 1

    second = rebuild(version)
    assert second == first  # the same picks, from the stored heads and stored uncertainties
    assert calls == {"fit": 1, "pool": 1, "backbone": 2}  # nothing refitted, featurized or even loaded


def test_new_labels_refit_the_ensemble_and_replace_the_pools_uncertainties(version, labeled_pool, annotator, calls):
    rebuild(version)
    before = ensemble.stored_ensemble(version)
    old_file = stored_uncertainty_files(version)
    assert simulation.label_queue(annotator=annotator, limit=3)
    rebuild(version)
    after = ensemble.stored_ensemble(version)
    assert calls["fit"] == 2 and calls["pool"] == 2
    assert after.labels != before.labels and not torch.equal(after.ensemble.weights, before.ensemble.weights)
    assert stored_uncertainty_files(version) != old_file and len(stored_uncertainty_files(version)) == 1


def test_only_solutions_new_to_the_pool_are_featurized_under_the_same_ensemble(version, labeled_pool, monkeypatch):
    rebuild(version)
    fitted = ensemble.stored_ensemble(version)
    pool = [c.solution_id for c in selection.candidates(model_version=version, project=Project.objects.sole())]
    problems, _ = simulation_pool.make_problems(pool="synthetic", data=None, n_pool=2, n_heldout=0, seed=5)
    new_ids = simulation_pool.write_problems(problems, split="pool", source="tests-new")
    asked = []
    original = ensemble.pool_uncertainty

    def recording(ens, ids, **where):
        asked.extend(ids)
        return original(ens, ids, **where)

    monkeypatch.setattr(ensemble, "pool_uncertainty", recording)
    known = ensemble.pool_uncertainty_for(version, fitted, [*pool, *new_ids])
    assert sorted(asked) == sorted(new_ids)
    assert set(known) == {*pool, *new_ids}


@pytest.mark.parametrize("which", ["ensemble", "uncertainties"])
@pytest.mark.parametrize("damage", [b"not a safetensors file", b""])
def test_a_corrupt_or_empty_stored_file_is_rebuilt_not_trusted(version, labeled_pool, calls, which, damage):
    first = rebuild(version)
    path = (ensemble.store_dir(version) / ensemble.ENSEMBLE_FILE if which == "ensemble"
            else stored_uncertainty_files(version)[0])
    path.write_bytes(damage)
    assert rebuild(version) == first
    assert calls["fit"] == (2 if which == "ensemble" else 1) and calls["pool"] == 2
    assert ensemble.stored_ensemble(version) is not None


def test_a_missing_store_is_refitted(version, labeled_pool, calls):
    first = rebuild(version)
    for path in ensemble.store_dir(version).iterdir():
        path.unlink()
    assert rebuild(version) == first and calls["fit"] == 2


def test_two_workers_asking_at_once_fit_once_and_get_the_same_heads(version, labeled_pool, calls):
    rows = label_rows.gather_rows()
    results, errors = [], []

    def ask():
        try:
            results.append(ensemble.fitted_for_version(version, rows))
        except Exception as error:  # surfaced below: a thread's exception is otherwise lost
            errors.append(error)

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and calls["fit"] == 1
    assert torch.equal(results[0].ensemble.weights, results[1].ensemble.weights)


def test_a_model_that_is_not_a_head_has_no_ensemble(version, labeled_pool):
    remote = ModelVersion.objects.create(name="far", kind="remote", path="http://127.0.0.1:9/x",
                                                  weights_sha256="1" * 64)
    assert ensemble.stored_ensemble(remote) is None
    assert ensemble.for_model_version(remote, labeled_pool, project=Project.objects.sole()) == {}


def test_scoring_with_the_ensemble_costs_one_backbone_pass_when_the_head_reads_its_layer(
        version, labeled_pool, tmp_path):
    # A trained head reads the training layer (~60 % depth), the layer the ensemble is fitted at.
    same_layer = registry.register_model_version(name="tiny-layer-1", path=build_tiny_prm(tmp_path / "l1", layer=1))
    fitted = ensemble.fitted_for_version(same_layer, label_rows.gather_rows())
    assert fitted.layer == 1
    solution = Solution.objects.get(pk=labeled_pool[0])
    items = [(solution.problem.statement, [s.text for s in solution.steps.order_by("index")])]
    loaded = registry.load(same_layer)
    before = loaded.forward_passes
    steps = scoring.score_texts(items=items, model_version=same_layer)[0]
    assert loaded.forward_passes - before == 1
    assert all(step["spread"] > 0 for step in steps)
    # The same probabilities as a rescore stores.
    scores.score_solutions(model_version=same_layer, solution_ids=[solution.pk])
    stored = StepScore.objects.filter(step__solution=solution, model_version=same_layer).order_by("step__index")
    assert [step["p"] for step in steps] == pytest.approx([s.p for s in stored], abs=1e-6)
