"""The pieces that make active learning pay off: a converged head, an ensemble, ensemble reasons."""
import io
import json
import math

import pytest
import torch
from django.conf import settings
from django.core.management import CommandError

import bench
from annotate.models import Project, QueueItem, Solution
from bench import simulation, simulation_pool, simulation_report, simulation_scale
from bench.tiny import build_tiny_backbone, build_tiny_prm
from scoring.core import evaluation
from scoring.core.training import regularized
from scoring.core.training.losses import StepTensors
from scoring.core.training_data import LabeledRow, TrainConfig
from scoring.rescoring import ensemble, label_rows, scores, selection
from scoring.store import registry


def planted(n: int, *, dim: int = 32, seed: int = 0, direction_seed: int = 99):
    """Rows x ~ N(0, I) with P(good) = sigmoid(x . w*): a problem a linear head can learn."""
    w_star = torch.randn(dim, generator=torch.Generator().manual_seed(direction_seed)) * 0.6
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    y = (torch.rand(n, generator=g) < torch.sigmoid(x @ w_star)).float()
    ones = torch.ones(n)
    return x, StepTensors(k=y, n=ones, pos_weight=ones, neg_weight=ones.clone()), [i // 3 for i in range(n)]


def auc(fit: regularized.Fit, x, t) -> float:
    return evaluation.roc_auc(fit.logits(x).tolist(), t.k.int().tolist())


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # fits as small as these are fastest on one


def test_converged_head_learns_more_with_more_labels_and_picks_weaker_l2():
    x_test, t_test, _ = planted(3000, seed=1)
    results = []
    for n in (30, 300, 3000):
        x, t, groups = planted(n, seed=2)
        fit = regularized.fit_converged(x, t, groups)
        results.append((auc(fit, x_test, t_test), fit.lam))
    aucs, lams = zip(*results)
    assert aucs[0] < aucs[1] < aucs[2]
    assert aucs[2] > 0.8  # the planted direction is found, not just a trend
    assert lams[0] >= lams[2]  # fewer labels, stronger shrinkage, as cross-validation chose
    # Converged: the gradient of the penalized loss vanishes at the solution.
    x, t, groups = planted(300, seed=2)
    fit = regularized.fit_converged(x, t, groups)
    z = fit.standardizer(x).requires_grad_(False)
    w = fit.w.clone().requires_grad_(True)
    b = fit.b.clone().requires_grad_(True)
    loss = regularized.weighted_log_loss(z @ w + b, t) + 0.5 * fit.lam * (w * w).sum()
    loss.backward()
    assert float(w.grad.abs().max()) < 1e-6 and abs(float(b.grad)) < 1e-6


def test_ensemble_spread_shrinks_where_labels_are_dense():
    x, t, groups = planted(600, seed=3)
    dense = x[:, 0] > -0.5  # nearly every labeled row is on this side; a handful on the other
    keep = dense | (torch.arange(len(x)) % 40 == 0)
    x, t = x[keep], regularized.take(t, keep)
    groups = [g for g, k in zip(groups, keep.tolist()) if k]
    ens = ensemble.fit_ensemble(x, t, groups, members=8, seed=0)
    probe = torch.randn(400, x.shape[1], generator=torch.Generator().manual_seed(4))
    spread = torch.tensor(ens.spread(probe))
    assert spread[probe[:, 0] > 0.5].mean() < 0.7 * spread[probe[:, 0] < -1.5].mean()


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return build_tiny_backbone(tmp_path_factory.mktemp("tiny-backbone"))


@pytest.fixture(scope="module")
def tiny(tiny_folder, tmp_path_factory):
    return simulation.load_backbone(tiny_folder, cache_dir=tmp_path_factory.mktemp("cache"), dtype=torch.float32)


@pytest.fixture(scope="module")
def tiny_scores(tiny):
    """An ensemble fitted on real tiny-model features of labeled synthetic solutions, and the pool's numbers."""
    problems, _ = simulation_pool.make_problems(pool="synthetic", data=None, n_pool=30, n_heldout=0)
    items = [(p.statement, s.steps) for p in problems for s in p.solutions]
    features = tiny.cache.features(tiny.loaded, items, layer=tiny.layer, backbone_id=tiny.backbone_id)
    pool = simulation_scale.Pool.of(problems, features)
    rows = simulation_scale.labeled_rows(pool, list(range(0, len(pool), 2)), bias_correction="importance")
    model = simulation_scale.train_round(pool, rows, members=6, seed=0)
    labeled = {r.solution_id for r in rows}
    return pool, model, simulation_scale.pool_candidates(pool, model, labeled, need_ensemble=True)


def test_each_ensemble_reason_picks_what_it_claims_on_real_scores(tiny_scores):
    _, _, pool = tiny_scores
    assert len({c.spread for c in pool}) > 3  # real, varied numbers

    def picked(reason, size=5):
        picks = selection.select(pool, selection.Policy(size=size, shares={reason: 1.0}, per_problem=99, seed=0))
        assert {p.reason for p in picks} == {reason}
        return [p.candidate for p in picks]

    top_spread = sorted(pool, key=lambda c: -c.spread)[:5]
    assert [c.solution_id for c in picked("disagreement")] == [c.solution_id for c in top_spread]
    first = picked("first_error_disagreement")
    assert min(c.first_error_disagreement for c in first) >= max(
        c.first_error_disagreement for c in pool if c not in first)
    wrong = picked("uncertain_convincing_wrong")
    assert all(c.is_correct is False for c in wrong)
    assert min(c.upper_score for c in wrong) >= max(c.upper_score for c in pool if c.is_correct is False
                                                   and c not in wrong)
    # The upper quantile is at least the mean head's product score for most solutions: it is optimistic.
    assert sum(c.upper_score >= c.score for c in pool) > 0.5 * len(pool)


def test_without_an_ensemble_its_reasons_fall_back_to_random(tiny_scores):
    _, _, pool = tiny_scores
    bare = [selection.Candidate(c.solution_id, c.problem_id, c.is_correct, c.score, c.sigma) for c in pool]
    picks = selection.select(bare, selection.Policy(size=6, shares={"disagreement": 1.0}, per_problem=99, seed=0))
    assert len(picks) == 6 and {p.reason for p in picks} == {"random"}


def test_converged_fit_is_selectable_in_production_training(tiny, tiny_scores):
    from scoring.core import training

    pool, _, _ = tiny_scores
    rows = simulation_scale.labeled_rows(pool, list(range(len(pool))), bias_correction="importance")
    config = TrainConfig(head="beta", fit="converged", layer=tiny.layer, val_fraction=0.2)
    result = training.train(rows, backbone=tiny.loaded, config=config, cache=tiny.cache,
                            backbone_id=tiny.backbone_id)
    assert result.metrics["lambda"] in regularized.LAMBDAS
    assert math.isfinite(result.metrics["best_loss"])
    probabilities = result.head.probabilities(pool.features.rows(0))
    assert all(0 < p.p < 1 and p.sigma is not None for p in probabilities)
    with pytest.raises(ValueError, match="fit="):
        TrainConfig(fit="exact").validate()


def test_rebuild_queue_serves_the_ensembles_picks_from_the_database(db, tiny):
    problems, _ = simulation_pool.make_problems(pool="synthetic", data=None, n_pool=12, n_heldout=0)
    ids = simulation_pool.write_problems(problems, split="pool", source="tests")
    head = simulation.untrained_head(tiny, 0)
    version = simulation.record_version("round-0", tiny, head)
    scores.score_solutions(model_version=version, solution_ids=ids,
                            prm=simulation.CachedScorer(tiny, tiny.with_head(head)))
    # Labels for a third of the pool, as gather_rows reads them, fit the production ensemble.
    solutions = {s.pk: s for s in Solution.objects.filter(pk__in=ids)}
    texts = label_rows.step_texts(ids)
    rows = []
    for pk in ids[::3]:
        ratings = simulation_pool.known_ratings(len(texts[pk]), solutions[pk].meta["first_error"])
        rows.append(LabeledRow(pk, solutions[pk].problem_id, solutions[pk].problem.statement, tuple(texts[pk]),
                               (tuple(ratings) + (None,) * (len(texts[pk]) - len(ratings)),)))
    ens = ensemble.fit_from_rows(rows, backbone=tiny.loaded, cache=tiny.cache, backbone_id=tiny.backbone_id,
                                 layer=tiny.layer, members=4)
    uncertainty = ensemble.pool_uncertainty(ens, ids, backbone=tiny.loaded, cache=tiny.cache,
                                            backbone_id=tiny.backbone_id, layer=tiny.layer)
    selection.rebuild_queue(model_version=version, project=Project.objects.sole(), uncertainty=uncertainty,
                            policy=selection.Policy(size=4, shares={"disagreement": 1.0}, per_problem=9, seed=0))
    queued = list(QueueItem.objects.filter(status=QueueItem.Status.AVAILABLE).values_list("solution_id", "reason"))
    top = sorted(uncertainty, key=lambda pk: (-uncertainty[pk].spread, pk))[:4]
    assert sorted(pk for pk, _ in queued) == sorted(top) and {r for _, r in queued} == {"disagreement"}


def test_rebuild_queue_fits_the_ensemble_itself_when_the_shares_ask_for_it(db, tmp_path, annotator, settings):
    settings.FEATURE_CACHE_DIR = tmp_path / "feature-cache"
    settings.ENSEMBLES_DIR = tmp_path / "ensembles"
    version = registry.register_model_version(name="tiny-head", path=build_tiny_prm(tmp_path / "model"))
    problems, _ = simulation_pool.make_problems(pool="synthetic", data=None, n_pool=12, n_heldout=0)
    ids = simulation_pool.write_problems(problems, split="pool", source="tests")
    scores.score_solutions(model_version=version, solution_ids=ids)
    project = Project.objects.sole()
    selection.rebuild_queue(model_version=version, project=project,
                            policy=selection.Policy.of(project, size=10, shares={"random": 1.0}, seed=0))
    assert len(simulation.label_queue(annotator=annotator, limit=10)) == 10
    generation = selection.rebuild_queue(
        model_version=version, project=project,
        policy=selection.Policy(size=4, shares={"disagreement": 1.0}, per_problem=9, seed=0))
    reasons = set(QueueItem.objects.filter(generation=generation.number).values_list("reason", flat=True))
    assert reasons == {"disagreement"}  # not the random fallback: the ensemble was fitted on the 10 labels


def test_default_shares_parse_and_name_only_known_reasons():
    shares = settings.STEPWISE_SELECTION_SHARES
    assert set(shares) <= set(selection.REASONS) and abs(sum(shares.values()) - 1) < 1e-9
    assert selection.parse_shares("disagreement=1,random=1") == {"disagreement": 0.5, "random": 0.5}
    with pytest.raises(ValueError, match="unknown reason 'ensemble'"):
        selection.parse_shares("ensemble=1")


def test_scale_loop_runs_every_strategy_and_reports_ratios(tiny):
    problems, held = simulation_pool.make_problems(pool="synthetic", data=None, n_pool=24, n_heldout=6)

    def features(items):
        return tiny.cache.features(tiny.loaded, items, layer=tiny.layer, backbone_id=tiny.backbone_id)

    sim = simulation_scale.ScaleSettings(budgets=(8, 14, 20), seeds=(0, 1), members=3,
                                         strategies=("random", "disagreement", "uncertain_convincing_wrong",
                                                     "disagreement=0.5,random=0.5"))
    partials = []
    result = simulation_scale.simulate_scale(pool_problems=problems, held_problems=held, features=features, sim=sim,
                                             on_seed=partials.append)
    for name, summary in result["strategies"].items():
        assert summary["labels"] == [8, 14, 20], name
    # After each seed the result so far is handed over, so a stopped run keeps its finished seeds.
    assert [p["settings"]["seeds"] for p in partials] == [[0], [0, 1]]
    assert partials[-1] == result and len(result["timing"]["seed_seconds"]) == 2
    assert result["efficiency_ratio"]["random"]["paired_auc"]["ratio"] == pytest.approx(1.0)
    assert set(result["efficiency_ratio"]) == set(sim.strategies)
    with pytest.raises(ValueError, match="--budgets"):
        simulation_scale.ScaleSettings(budgets=(8, 500)).validate(len(problems))


def rounded(value):
    """The result with floats to 9 digits: exp(log(x)) of a one-seed mean is x to the last ulp only."""
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def test_runs_over_disjoint_seeds_merge_into_the_run_over_all_of_them(tiny):
    problems, held = simulation_pool.make_problems(pool="synthetic", data=None, n_pool=24, n_heldout=6)

    def features(items):
        return tiny.cache.features(tiny.loaded, items, layer=tiny.layer, backbone_id=tiny.backbone_id)

    def run(seeds):
        sim = simulation_scale.ScaleSettings(budgets=(8, 14, 20), seeds=seeds, members=3,
                                             strategies=("random", "disagreement"))
        return simulation_scale.simulate_scale(pool_problems=problems, held_problems=held, features=features,
                                               sim=sim)

    together = run((0, 1, 2))
    merged = simulation_scale.merge([run((2,)), run((0, 1))])
    for key in ("strategies", "efficiency_ratio", "baselines", "pool", "held_out"):
        assert rounded(merged[key]) == rounded(together[key]), key
    assert merged["settings"]["seeds"] == [0, 1, 2]
    with pytest.raises(ValueError, match="a seed appears twice"):
        simulation_scale.merge([together, run((1,))])
    other = run((5,))
    other["settings"]["budgets"] = [8, 20]
    with pytest.raises(ValueError, match="differ in budgets"):
        simulation_scale.merge([together, other])


def test_scale_command_shares_the_setup_writes_every_finished_seed_and_merges_runs(tiny_folder, tmp_path):
    output = tmp_path / "al.json"
    common = ["--scale", "--pool", "synthetic", "--problems", "20", "--heldout", "5", "--budgets", "6", "12",
              "--members", "2", "--strategies", "random", "disagreement", "--backbone", str(tiny_folder),
              "--cache-dir", str(tmp_path / "cache"), "--plot", str(tmp_path / "al.svg")]
    bench.call("simulate_active_learning", *common, "--seeds", "0", "1", "--output", str(output),
                 stdout=io.StringIO())
    result = json.loads(output.read_text())
    assert result["settings"]["seeds"] == [0, 1] and result["settings"]["pool"] == "synthetic"
    assert result["settings"]["layer"] >= 1 and (tmp_path / "al.svg").exists()
    assert result["timing"]["featurized_tokens"] > 0
    # A second run over another seed (side by side on an idle core) merges into one result.
    bench.call("simulate_active_learning", *common, "--seeds", "2", "--output", str(tmp_path / "al2.json"),
                 stdout=io.StringIO())
    bench.call("simulate_active_learning", "--merge", str(output), str(tmp_path / "al2.json"),
                 "--output", str(tmp_path / "all.json"), "--plot", str(tmp_path / "all.svg"), stdout=io.StringIO())
    merged = json.loads((tmp_path / "all.json").read_text())
    assert merged["settings"]["seeds"] == [0, 1, 2] and merged["strategies"]["random"]["seeds"] == 3
    assert merged["settings"]["pool"] == "synthetic" and (tmp_path / "all.svg").exists()
    # Bad settings are refused by the same checks as the database loop, before any backbone loads.
    with pytest.raises(CommandError, match="--budgets"):
        bench.call("simulate_active_learning", "--scale", "--budgets", "50", "20", "--backbone", "/nonexistent")
    with pytest.raises(CommandError, match="--strategies: unknown nope"):
        bench.call("simulate_active_learning", "--scale", "--strategies", "nope", "--backbone", "/nonexistent")


def test_what_a_scale_run_writes_after_a_seed_names_its_setup_and_plots_like_the_final_result(tiny, tmp_path):
    from bench.commands import simulate_active_learning as command

    problems, held = simulation_pool.make_problems(pool="synthetic", data=None, n_pool=20, n_heldout=5)
    sim = simulation_scale.ScaleSettings(budgets=(6, 12), seeds=(0,), members=2, strategies=("random",))
    described = {"pool": "synthetic", "problems": 20, "heldout": 5, "layer": tiny.layer, "backbone": "tiny"}
    command.run_scale(tiny, problems, held, sim, {"threads": 1, "output": tmp_path / "seed0.json"},
                      described=described)
    checkpoint = json.loads((tmp_path / "seed0.json").read_text())  # run_scale alone writes only checkpoints
    assert checkpoint["settings"].items() >= described.items()
    assert simulation_report.plot(checkpoint, tmp_path / "seed0.svg").exists()


def test_digit_swap_of_a_negative_result_keeps_the_sign_so_the_whole_gsm8k_pool_builds():
    import random as random_module

    from bench import corruption

    assert corruption._wrong_value("-153", "digit_swap", random_module.Random(0)) == "-351"
    assert corruption._wrong_value("153", "digit_swap", random_module.Random(0)) == "351"
