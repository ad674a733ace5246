"""The PRM: one forward pass per solution gives the same step scores as one pass per prefix."""
import json

import pytest
import torch

from bench.tiny import build_tiny_prm
from scoring.core import encoding, prm, step_marker

ITEMS = [
    ("What is 2 + 2?", ["First, 2 + 2 = 4.", "So the answer is 4.", "# Answer\n\n4"]),
    ("Solve 3x = 12.", [f"Step {i}: divide both sides by 3, so x = {i}." for i in range(8)]),
    ("Is 17 prime?", ["Yes."]),
    ("Área of a circle with r = 3?", ["A = \\pi r^2 = 9\\pi", "# Answer\n\n9\\pi"]),
]

KINDS = [
    pytest.param("head", "point", None, id="head-point-last-layer"),
    pytest.param("head", "beta", 1, id="head-beta-layer-1"),
    pytest.param("step_token", "point", None, id="step-token"),
    pytest.param("token_classification", "point", None, id="token-classification"),
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("prms")
    return {
        (kind, head_type, layer): build_tiny_prm(
            root / f"{kind}-{head_type}-{layer}", kind=kind, head_type=head_type, layer=layer
        )
        for kind, head_type, layer in [p.values for p in KINDS]
    }


@pytest.mark.parametrize("kind, head_type, layer", KINDS)
def test_one_pass_scores_equal_per_prefix_scores_for_every_kind(folders, kind, head_type, layer):
    # A small token budget forces several padded batches of different widths.
    model = prm.load_prm(folders[kind, head_type, layer], device="cpu", dtype=torch.float32, max_tokens=120)
    one_pass = model.step_probabilities(ITEMS)
    per_prefix = model.score_per_prefix(ITEMS)
    assert [len(s) for s in one_pass] == [len(steps) for _, steps in ITEMS]
    for fast, slow in zip(one_pass, per_prefix):
        for a, b in zip(fast, slow, strict=True):
            assert abs(a.p - b.p) <= 1e-5
            assert 0.0 < a.p < 1.0
    # Different steps get different scores: the read-out positions really move.
    assert len({round(s.p, 6) for s in one_pass[1]}) > 1


def test_one_pass_needs_one_forward_per_batch_not_per_step(folders):
    model = prm.load_prm(folders["head", "point", None], device="cpu", dtype=torch.float32)
    model.step_probabilities(ITEMS)
    assert model.forward_passes == 1
    model.score_per_prefix(ITEMS)
    assert model.forward_passes == 1 + sum(len(steps) for _, steps in ITEMS)


def test_a_padded_batch_scores_each_solution_as_it_scores_alone(folders):
    # A causal model's batches go without an attention mask (its real tokens never read the padding
    # after them); a backbone that reads both ways keeps the mask, so its batch-mates do not leak in.
    from transformers import BertConfig, BertModel

    for bidirectional in (False, True):
        model = prm.load_prm(folders["head", "point", None], device="cpu", dtype=torch.float32, max_tokens=120)
        if bidirectional:
            torch.manual_seed(0)
            model.model = BertModel(BertConfig(vocab_size=len(model.tokenizer), hidden_size=32, num_hidden_layers=2,
                                               num_attention_heads=4, intermediate_size=64)).eval()
        batched = model.step_probabilities(ITEMS)
        alone = [model.step_probabilities([item])[0] for item in ITEMS]
        for together, by_itself in zip(batched, alone, strict=True):
            for a, b in zip(together, by_itself, strict=True):
                assert abs(a.p - b.p) <= 1e-5


def test_real_model_responses_score_the_same_batched_as_alone(folders):
    # Qwen2.5-Math's responses, split as an import splits them: lengths that differ by hundreds of
    # tokens, so nearly every batch is padded.
    from steps.splitting import split_steps
    from tests.steps.test_splitting import _jsonl

    lines = _jsonl("model-responses/math_qwen25_cot_20x8.jsonl")[:3]
    items = [(line["question"], split_steps(response)) for line in lines for response in line["response"][:4]]
    model = prm.load_prm(folders["head", "point", None], device="cpu", dtype=torch.float32, max_tokens=4096)
    batched = model.step_probabilities(items)
    assert model.forward_passes < len(items)
    for (problem, steps), together in zip(items, batched, strict=True):
        for a, b in zip(together, model.step_probabilities([(problem, steps)])[0], strict=True):
            assert abs(a.p - b.p) <= 1e-5


def test_beta_head_reports_mean_and_sigma_from_kappa(folders):
    model = prm.load_prm(folders["head", "beta", 1], device="cpu", dtype=torch.float32)
    steps = model.step_probabilities(ITEMS[:1])[0]
    features = model.step_features(ITEMS[:1], layer=1)[0]
    mu_logit, kappa = model.head(features)
    mu = torch.sigmoid(mu_logit)
    expected_sigma = torch.sqrt(mu * (1 - mu) / (kappa + 1))
    assert features.shape == (3, model.model.config.hidden_size)
    for step, m, s in zip(steps, mu.tolist(), expected_sigma.tolist()):
        assert step.mean == pytest.approx(m, abs=1e-6) and step.p == step.mean
        assert step.sigma == pytest.approx(s, abs=1e-6) and step.sigma > 0


def test_point_head_has_no_sigma(folders):
    model = prm.load_prm(folders["head", "point", None], device="cpu", dtype=torch.float32)
    assert all(s.sigma is None and s.mean is None for s in model.step_probabilities(ITEMS[:1])[0])


def test_bf16_scores_stay_close_to_float32(folders):
    folder = folders["head", "point", None]
    full = prm.load_prm(folder, device="cpu", dtype=torch.float32).step_probabilities(ITEMS)
    half = prm.load_prm(folder, device="cpu", dtype=torch.bfloat16).step_probabilities(ITEMS)
    assert max(abs(a.p - b.p) for x, y in zip(full, half) for a, b in zip(x, y)) < 0.05


def test_build_input_puts_the_separator_after_every_step():
    pieces = prm.build_input("Problem?", ["a", " b "], separator=" ки\n")
    assert pieces == ["Problem?\n\n", "a ки\n", "b ки\n"]


def test_token_budget_batches_sort_by_length_and_respect_the_budget():
    lengths = [5, 50, 7, 48, 6, 200]
    batches = list(encoding.token_budget_batches(lengths, max_tokens=100))
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert batches[0] == [5]  # over budget alone, not dropped
    for batch in batches[1:]:
        assert max(lengths[i] for i in batch) * len(batch) <= 100
        assert [lengths[i] for i in batch] == sorted((lengths[i] for i in batch), reverse=True)


def test_pickle_weights_are_refused(tmp_path, folders):
    folder = build_tiny_prm(tmp_path / "m")
    (folder / "pytorch_model.bin").write_bytes(b"not loaded, ever")
    with pytest.raises(prm.ModelFormatError, match="pickle weights.*pytorch_model.bin"):
        prm.load_prm(folder, device="cpu")


def test_folder_without_safetensors_is_refused(tmp_path):
    folder = build_tiny_prm(tmp_path / "m")
    (folder / "model.safetensors").unlink()
    with pytest.raises(prm.ModelFormatError, match="no model\\*.safetensors"):
        prm.load_prm(folder, device="cpu")


def test_bad_config_names_the_field(tmp_path):
    folder = build_tiny_prm(tmp_path / "m")
    config = json.loads((folder / "stepwise.json").read_text())
    (folder / "stepwise.json").write_text(json.dumps({**config, "kind": "magic"}))
    with pytest.raises(prm.ModelFormatError, match="'kind' must be one of"):
        prm.load_prm(folder, device="cpu")
    (folder / "stepwise.json").write_text("{\n  oops")
    with pytest.raises(prm.ModelFormatError, match="invalid JSON at line 2"):
        prm.load_prm(folder, device="cpu")


def test_head_saved_and_loaded_round_trips(tmp_path):
    head = prm.StepHead(16, "beta")
    prm.save_head_model(tmp_path, head=head, backbone=".", layer=3, meta={"epochs": 1})
    config = prm.read_model_config(tmp_path)
    assert config["head"] == {"type": "beta", "layer": 3, "hidden_size": 16}
    loaded = prm.StepHead.load(tmp_path, config["head"])
    h = torch.randn(4, 16)
    for a, b in zip(head(h), loaded(h)):
        assert torch.equal(a, b)


def test_weights_hash_changes_when_any_weight_file_changes(tmp_path):
    folder = build_tiny_prm(tmp_path / "m")
    before = prm.weights_sha256(folder)
    assert prm.weights_sha256(folder) == before
    prm.StepHead(32, "point").save(folder)
    assert prm.weights_sha256(folder) != before


def test_aggregate_product_min_last_mean_and_sigma():
    steps = [prm.StepProbability(0.5, 0.5, 0.1), prm.StepProbability(0.8, 0.8, 0.3), prm.StepProbability(0.9, 0.9, 0.2)]
    assert prm.aggregate(steps) == pytest.approx(
        {"product": 0.36, "min": 0.5, "last": 0.9, "mean": 2.2 / 3, "sigma": 0.2}
    )
    assert prm.aggregate([prm.StepProbability(0.25)])["sigma"] is None


def test_fast_path_tokenizes_exactly_like_the_tokenizer(folders):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folders["head", "point", None])
    texts = [piece for problem, steps in ITEMS for piece in prm.build_input(problem, steps)] + ["  ки\n", "π"]
    for special_tokens in (False, True):
        assert step_marker.token_ids(tokenizer, texts, special_tokens=special_tokens) == \
            tokenizer(texts, add_special_tokens=special_tokens)["input_ids"]


def test_token_budget_is_narrow_on_a_cpu_and_wide_on_an_accelerator():
    assert prm.default_token_budget(torch.device("cpu")) < prm.default_token_budget(torch.device("cuda"))
