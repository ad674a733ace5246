"""Training: label counting, the split, the losses against hand-computed values, and a tiny model."""
import json
import math

import pytest
import torch

from bench.tiny import build_tiny_backbone
from scoring.core import prm, training
from scoring.core.training_data import (
    LabeledRow,
    TrainConfig,
    build_examples,
    split_by_problem,
    step_counts,
    stratum_weights,
)


def row(solution_id, problem_id, ratings, n_steps=4, weight=1.0):
    steps = tuple(f"Step {i} of solution {solution_id}: {i} + {problem_id} = {i + problem_id}" for i in range(n_steps))
    return LabeledRow(solution_id=solution_id, problem_id=problem_id, problem=f"Problem {problem_id}",
                      steps=steps, ratings=tuple(tuple(r) for r in ratings), weight=weight)


# --- labels -------------------------------------------------------------------------------------


def test_steps_after_the_first_error_carry_no_label():
    k, n = step_counts([[1, 1, -1, 1, 1]], 5)
    assert (k, n) == ([1, 1, 0, 0, 0], [1, 1, 1, 0, 0])


def test_each_annotator_is_masked_after_their_own_first_error():
    k, n = step_counts([[1, -1, 1], [1, 1, -1]], 3)
    assert k == [2, 1, 0]
    assert n == [2, 2, 1]


def test_neutral_counts_as_positive_by_default_and_is_configurable():
    ratings = [[0, 1, 0]]
    assert step_counts(ratings, 3) == ([1, 1, 1], [1, 1, 1])
    assert step_counts(ratings, 3, neutral="negative") == ([0, 1, 0], [1, 1, 1])
    assert step_counts(ratings, 3, neutral="ignore") == ([0, 1, 0], [0, 1, 0])


def test_a_neutral_is_not_an_error_so_later_steps_stay_labeled():
    assert step_counts([[0, 0, 1]], 3, neutral="negative") == ([0, 0, 1], [1, 1, 1])


def test_unrated_steps_are_skipped_and_bad_ratings_are_refused():
    assert step_counts([[1, None, 1]], 3) == ([1, 0, 1], [1, 0, 1])
    with pytest.raises(ValueError, match="rating 2 at step 1"):
        step_counts([[1, 2]], 2)


def test_solutions_without_any_labeled_step_are_dropped():
    examples = build_examples([row(1, 1, [[None] * 4]), row(2, 1, [[1, -1]])])
    assert [e.row.solution_id for e in examples] == [2]


def test_split_is_by_problem_and_stable_as_data_grows():
    rows = [row(10 * p + s, p, [[1, 1, -1]]) for p in range(40) for s in range(3)]
    train, val = split_by_problem(build_examples(rows), val_fraction=0.25, seed=0)
    train_problems = {e.row.problem_id for e in train}
    val_problems = {e.row.problem_id for e in val}
    assert train_problems and val_problems and not train_problems & val_problems
    assert 4 <= len(val_problems) <= 18
    # Adding problems never moves an existing one to the other side.
    more = rows + [row(1000 + p, 100 + p, [[1]]) for p in range(30)]
    _, val_more = split_by_problem(build_examples(more), val_fraction=0.25, seed=0)
    assert val_problems <= {e.row.problem_id for e in val_more}


def test_two_problems_always_give_one_for_training_and_one_held_out():
    train, val = split_by_problem(build_examples([row(1, 1, [[1]]), row(2, 2, [[1]])]), val_fraction=0.01, seed=3)
    assert len(train) == len(val) == 1


def test_importance_weights_restore_the_pool_mix():
    # Labeled: 9 wrong-answer solutions, 1 right; the pool is half and half.
    weights = stratum_weights([False] * 9 + [True], {False: 500, True: 500})
    assert weights[0] == pytest.approx(0.5 / 0.9)
    assert weights[-1] == pytest.approx(0.5 / 0.1)
    assert sum(weights[:9]) == pytest.approx(sum(weights[9:]))


def test_bad_options_are_refused_naming_the_field():
    with pytest.raises(ValueError, match="head='gaussian'"):
        TrainConfig.from_dict({"head": "gaussian"})
    with pytest.raises(ValueError, match="unknown training option"):
        TrainConfig.from_dict({"epoch": 3})


# --- losses -----------------------------------------------------------------------------------


def test_point_loss_is_bce_for_single_labels():
    z = torch.tensor([0.3, -1.2])
    loss = training.point_loss(z, torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0]))
    p = [1 / (1 + math.exp(-0.3)), 1 / (1 + math.exp(1.2))]
    assert float(loss) == pytest.approx((-math.log(p[0]) - math.log(1 - p[1])) / 2, rel=1e-5)


def test_point_loss_counts_k_of_n_and_class_weights():
    z = torch.tensor([0.5])
    p = 1 / (1 + math.exp(-0.5))
    loss = training.point_loss(z, torch.tensor([2.0]), torch.tensor([3.0]), torch.tensor([2.0]), torch.tensor([0.5]))
    expected = (2.0 * 2 * -math.log(p) + 0.5 * 1 * -math.log(1 - p)) / (2.0 * 2 + 0.5 * 1)
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def hand_beta_binomial_nll(k, n, mu, kappa):
    a, b = mu * kappa, (1 - mu) * kappa
    lg = math.lgamma
    log_choose = lg(n + 1) - lg(k + 1) - lg(n - k + 1)
    return -(log_choose + lg(k + a) + lg(n - k + b) - lg(n + a + b) + lg(a + b) - lg(a) - lg(b))


@pytest.mark.parametrize("k,n,mu,kappa", [(1, 1, 0.7, 4.0), (0, 1, 0.7, 4.0), (2, 3, 0.4, 10.0), (5, 5, 0.9, 0.5)])
def test_beta_binomial_nll_matches_lgamma(k, n, mu, kappa):
    k, n, mu_t, kappa_t = (torch.tensor([float(v)], dtype=torch.float64) for v in (k, n, mu, kappa))
    value = training.beta_binomial_nll(k, n, mu_t, kappa_t)
    assert float(value) == pytest.approx(hand_beta_binomial_nll(int(k), int(n), mu, kappa), rel=1e-9)


def test_beta_binomial_of_one_label_is_bernoulli_in_mu():
    # With N = 1 the beta-binomial is Bernoulli(mu) whatever kappa is.
    assert hand_beta_binomial_nll(1, 1, 0.7, 4.0) == pytest.approx(-math.log(0.7))


def test_beta_loss_adds_the_reliability_term():
    z = torch.tensor([0.0, 1.0], dtype=torch.float64)
    kappa = torch.tensor([4.0, 2.0], dtype=torch.float64)
    k, n = torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([2.0, 1.0], dtype=torch.float64)
    mu = [0.5, 1 / (1 + math.exp(-1.0))]
    nll = (hand_beta_binomial_nll(1, 2, mu[0], 4.0) + hand_beta_binomial_nll(0, 1, mu[1], 2.0)) / 2
    reliability = (abs(mu[0] - 0.5) * 4.0 + abs(mu[1] - 0.0) * 2.0) / 2
    assert float(training.beta_loss(z, kappa, k, n, lam=0.05)) == pytest.approx(nll + 0.05 * reliability, rel=1e-9)


def test_reliability_term_trains_kappa_not_mu():
    z = torch.tensor([1.0], requires_grad=True)
    kappa = torch.tensor([3.0], requires_grad=True)
    k, n = torch.tensor([1.0]), torch.tensor([1.0])
    training.beta_loss(z, kappa, k, n, lam=1.0).backward()
    nll_only = torch.tensor([1.0], requires_grad=True)
    training.beta_loss(nll_only, torch.tensor([3.0]), k, n, lam=0.0).backward()
    assert float(z.grad) == pytest.approx(float(nll_only.grad))  # stopgrad(mu) in the penalty
    assert float(kappa.grad) > 0  # a wrong-ish mu makes confidence costly


def test_new_beta_head_starts_at_kappa_init_and_base_rate():
    head = training.new_head(8, TrainConfig(head="beta", kappa_init=4.0), base_rate=0.8)
    mu_logit, kappa = head(torch.zeros(3, 8))
    assert torch.allclose(kappa, torch.full((3,), 4.0), atol=1e-5)
    assert torch.allclose(torch.sigmoid(mu_logit), torch.full((3,), 0.8), atol=1e-5)


def test_kappa_head_learns_ten_times_faster():
    head = training.new_head(8, TrainConfig(head="beta", lr=1e-3), base_rate=0.5)
    lrs = [g["lr"] for g in training.head_optimizer(head, TrainConfig(head="beta", lr=1e-3)).param_groups]
    assert lrs == [pytest.approx(1e-3), pytest.approx(1e-2)]


def test_class_weighting_moves_the_base_rate_to_the_target():
    examples = build_examples([row(i, i, [[1, 1, 1, -1]]) for i in range(10)])
    t = training.step_tensors(examples, TrainConfig(bias_correction="class", target_base_rate=0.5))
    weighted_rate = float((t.pos_weight * t.k).sum() / (t.pos_weight * t.k + t.neg_weight * (t.n - t.k)).sum())
    assert float(t.k.sum() / t.n.sum()) == pytest.approx(0.75)
    assert weighted_rate == pytest.approx(0.5)


# --- the loop on a tiny model --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory):
    return build_tiny_backbone(tmp_path_factory.mktemp("tiny") / "backbone")


def learnable_rows():
    """Steps that say 'wrong' are bad: a frozen random backbone still separates the tokens."""
    rows = []
    for p in range(16):
        for s in range(3):
            bad = (p + s) % 3  # index of the wrong step (2 = none)
            steps = tuple(("so the answer is wrong" if i == bad else f"add {i} and {p}") for i in range(3))
            ratings = [(-1 if i == bad else 1) for i in range(3)]
            rows.append(LabeledRow(solution_id=100 * p + s, problem_id=p, problem=f"Problem {p}", steps=steps,
                                   ratings=(tuple(ratings),)))
    return rows


@pytest.mark.parametrize("head_type", ["point", "beta"])
def test_head_only_training_caches_features_and_saves_a_loadable_model(tiny_backbone, tmp_path, head_type):
    backbone = training.load_backbone(tiny_backbone, device="cpu", dtype=torch.float32)
    cache = training.FeatureCache(tmp_path / "cache")
    backbone_id = training.backbone_fingerprint(tiny_backbone)
    config = TrainConfig(head=head_type, epochs=60, lr=3e-2, val_fraction=0.25)
    result = training.train(learnable_rows(), backbone=backbone, config=config, cache=cache, backbone_id=backbone_id)
    assert cache.misses == len(result.train_examples) + len(result.val_examples) and cache.hits == 0
    assert result.loss_curve[-1]["train_loss"] < result.loss_curve[0]["train_loss"]

    folder = training.save_checkpoint(result, tmp_path / "model", parent_backbone=tiny_backbone,
                                      tokenizer=backbone.tokenizer)
    config_file = json.loads((folder / prm.CONFIG_NAME).read_text())
    assert config_file["backbone"] == "../../" + "/".join(tiny_backbone.parts[-2:])  # referenced, not copied
    assert not list(folder.glob("model*.safetensors"))
    meta = json.loads((folder / prm.META_NAME).read_text())
    assert meta["config"]["head"] == head_type and meta["data"]["val"]["problems"] >= 1

    loaded = prm.load_prm(folder, device="cpu", dtype=torch.float32)
    items = [(e.row.problem, list(e.row.steps)) for e in result.val_examples]
    direct = loaded.step_probabilities(items)
    cached = training.step_probabilities(loaded, items, cache=cache, backbone_id=backbone_id)
    assert cache.hits == len(items)  # the second model read of the same solutions reused the cache
    for a, b in zip(direct, cached):
        assert [s.p for s in a] == pytest.approx([s.p for s in b], abs=1e-5)
    if head_type == "beta":
        assert all(s.sigma is not None and s.sigma > 0 for s in direct[0])
    # Held-out steps: the wrong ones score lower than the right ones.
    scores = [(s.p, n == 1 and k == 1) for e, ps in zip(result.val_examples, direct)
              for s, k, n in zip(ps, e.k, e.n) if n]
    good = [p for p, ok in scores if ok]
    bad = [p for p, ok in scores if not ok]
    assert sum(good) / len(good) > sum(bad) / len(bad)


def test_head_training_writes_features_only_where_the_caller_says(tiny_backbone, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    backbone = training.load_backbone(tiny_backbone, device="cpu", dtype=torch.float32)
    with pytest.raises(ValueError, match="needs a feature cache"):
        training.train(learnable_rows(), backbone=backbone, config=TrainConfig(epochs=2), backbone_id="b")
    assert list(tmp_path.iterdir()) == []  # nothing written into the current folder


def test_same_seed_gives_the_same_head(tiny_backbone, tmp_path):
    backbone = training.load_backbone(tiny_backbone, device="cpu", dtype=torch.float32)
    cache = training.FeatureCache(tmp_path / "cache")
    heads = [
        training.train(learnable_rows(), backbone=backbone, config=TrainConfig(epochs=5), cache=cache,
                       backbone_id="x").head.mu.weight
        for _ in range(2)
    ]
    assert torch.equal(heads[0], heads[1])


@pytest.mark.parametrize("mode", ["topk", "lora", "full"])
def test_backbone_modes_train_and_save_their_backbone(tiny_backbone, tmp_path, mode):
    backbone = training.load_backbone(tiny_backbone, device="cpu", dtype=torch.float32)
    before = {n: p.detach().clone() for n, p in backbone.model.named_parameters()}
    config = TrainConfig(mode=mode, epochs=2, batch_size=8, backbone_lr=1e-2, gradient_checkpointing=mode == "full")
    result = training.train(learnable_rows(), backbone=backbone, config=config)
    changed = [n for n, p in result.backbone.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert changed
    if mode == "topk":  # only the top layers below the read-out layer moved
        assert all(n.startswith(f"layers.{result.layer - 1}.") for n in changed)
    folder = training.save_checkpoint(
        result, tmp_path / "m", parent_backbone=tiny_backbone, tokenizer=backbone.tokenizer
    )
    assert json.loads((folder / prm.CONFIG_NAME).read_text())["backbone"] == "."
    loaded = prm.load_prm(folder, device="cpu", dtype=torch.float32)
    assert len(loaded.step_probabilities([("Problem 1", ["add 1", "wrong"])])[0]) == 2


def test_truncating_layers_reads_the_same_hidden_state(tiny_backbone):
    backbone = training.load_backbone(tiny_backbone, device="cpu", dtype=torch.float32)
    items = [("Problem 3", ["add 1 and 3", "so the answer is wrong"])]
    full = backbone.step_features(items, layer=1)[0]
    with training.truncated(backbone.model, 1) as read_at:
        short = backbone.step_features(items, layer=read_at)[0]
    assert read_at is None
    assert torch.allclose(full, short, atol=1e-5)
    assert len(training.decoder_layers_owner(backbone.model).layers) == 2  # restored


def test_truncating_a_lora_wrapped_backbone_reads_the_layer_it_names(tiny_backbone):
    """peft's wrapper hands `layers` on from the model inside: the cut must reach that model."""
    from peft import LoraConfig, get_peft_model

    backbone = training.load_backbone(tiny_backbone, device="cpu", dtype=torch.float32)
    items = [("Problem 3", ["add 1 and 3", "so the answer is wrong"])]
    full = backbone.step_features(items, layer=1)[0]
    last = backbone.step_features(items, layer=None)[0]
    backbone.model = get_peft_model(backbone.model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    with training.truncated(backbone.model, 1) as read_at:
        short = backbone.step_features(items, layer=read_at)[0]
    assert torch.allclose(full, short, atol=1e-5) and not torch.allclose(last, short, atol=1e-3)


def test_importance_weighting_keeps_the_pool_base_rate_under_skewed_selection(tiny_backbone, tmp_path):
    # Selection served 18 wrong-answer solutions for 2 right ones; the pool is half and half.
    # Every solution reads the same, so the head can only learn a base rate: the labeled
    # one (2/20 = 0.1) without correction, the pool's (hand-computed 0.5) with it.
    strata = [i < 2 for i in range(20)]
    weights = stratum_weights(strata, {True: 100, False: 100})
    rows = [LabeledRow(solution_id=i, problem_id=i, problem="Same problem", steps=("same step",),
                       ratings=((1 if right else -1,),), weight=w) for i, (right, w) in enumerate(zip(strata, weights))]
    backbone = training.load_backbone(tiny_backbone, device="cpu", dtype=torch.float32)
    cache = training.FeatureCache(tmp_path / "cache")
    [h] = cache.features(backbone, [("Same problem", ["same step"])], layer=1, backbone_id="b")

    def learned_rate(correction: str) -> float:
        config = TrainConfig(bias_correction=correction, epochs=100, lr=0.05, val_fraction=0.0, layer=1)
        head = training.train(rows, backbone=backbone, config=config, cache=cache, backbone_id="b").head
        return head.probabilities(h)[0].p

    assert learned_rate("importance") == pytest.approx(0.5, abs=0.02)
    assert learned_rate("none") == pytest.approx(0.1, abs=0.02)
    assert learned_rate("class") == pytest.approx(0.5, abs=0.02)  # target = the importance-weighted rate
