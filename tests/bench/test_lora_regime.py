"""The LoRA regime: a fresh LoRA fit per round on real GSM8K solutions, selection on a rescored subsample."""
import io
import json

import pytest
import torch
from django.core.management import CommandError

import bench
from bench import lora_regime
from bench.simulation_pool import make_problems
from bench.tiny import build_tiny_backbone
from scoring.core.training import load_backbone
from scoring.core.training.features import backbone_fingerprint
from scoring.store.default_model import backbone_separator
from tests.conftest import TEST_DATA

TINY = ["--data", str(TEST_DATA), "--problems", "16", "--heldout", "6", "--candidates", "24",
        "--layer", "1", "--max-tokens", "512", "--threads", "1"]


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory):
    return build_tiny_backbone(tmp_path_factory.mktemp("lora") / "backbone", step_marker=True)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # fits as small as these are fastest on one


def test_each_round_adapts_a_fresh_copy_and_convincing_wrong_adds_only_wrong_answers(tiny_backbone):
    pool, held = make_problems(pool="gsm8k", data=TEST_DATA, n_pool=16, n_heldout=6)
    settings = lora_regime.LoraSettings(budgets=[6, 12], policies=["random", "convincing_wrong"], seeds=[0],
                                        candidates=24, layer=1, max_tokens=512)
    before = backbone_fingerprint(tiny_backbone)
    curves = lora_regime.run_seed(pool, held, settings, seed=0, backbone=tiny_backbone,
                                  separator=backbone_separator(tiny_backbone))
    # Training merges the adapters into the model it loaded, never into the folder every round starts from.
    assert backbone_fingerprint(tiny_backbone) == before
    start, end = curves["convincing_wrong"]
    assert start == curves["random"][0] and [start["labels"], end["labels"]] == [6, 12]
    # The 6 picks after the shared first 6 are all wrong answers.
    assert end["wrong_share"] * 12 == pytest.approx(start["wrong_share"] * 6 + 6)
    assert end["train_tokens"] > start["train_tokens"] > 0


def test_the_shallow_backbone_reads_what_the_full_one_holds_at_that_layer(tiny_backbone):
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    full = load_backbone(tiny_backbone, device="cpu", dtype=torch.float32)
    cut = lora_regime.shallow(load_backbone(tiny_backbone, device="cpu", dtype=torch.float32), 1)
    with torch.no_grad():
        expected = full.model(input_ids=ids, output_hidden_states=True).hidden_states[1]
        assert torch.allclose(cut.model(input_ids=ids).last_hidden_state, expected, atol=1e-6)
    with pytest.raises(ValueError, match="layer=3"):
        lora_regime.shallow(full, 3)


def test_solutions_longer_than_the_limit_leave_the_pool(tiny_backbone):
    pool, _ = make_problems(pool="gsm8k", data=TEST_DATA, n_pool=20, n_heldout=1)
    backbone = load_backbone(tiny_backbone, device="cpu", dtype=torch.float32)
    lengths = sorted(len(backbone.encode(p.statement, s.steps).ids) for p in pool for s in p.solutions)
    limit = lengths[len(lengths) // 2]
    kept = lora_regime.fitting(pool, backbone, max_tokens=limit)
    assert 0 < sum(len(p.solutions) for p in kept) < len(lengths)
    assert all(len(backbone.encode(p.statement, s.steps).ids) <= limit for p in kept for s in p.solutions)


def test_the_command_gives_curves_and_ratios_per_policy(tiny_backbone, tmp_path):
    out, output = io.StringIO(), tmp_path / "lora.json"
    bench.call("simulate_lora", "--backbone", str(tiny_backbone), *TINY, "--budgets", "4", "10", "--seeds", "0", "1",
               "--policies", "random", "rollout_disagreement", "--output", str(output), "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert json.loads(output.read_text())["settings"]["seeds"] == [0, 1]
    for summary in result["strategies"].values():
        assert summary["labels"] == [4, 10] and summary["seeds"] == 2
    assert result["efficiency"]["random"]["step_auc"]["ratio"] == pytest.approx(1.0)


def test_bad_settings_are_named(tiny_backbone):
    with pytest.raises(CommandError, match="--policies"):
        bench.call("simulate_lora", "--backbone", str(tiny_backbone), *TINY, "--policies", "ensemble")
    with pytest.raises(CommandError, match="--candidates"):
        bench.call("simulate_lora", "--backbone", str(tiny_backbone), *TINY, "--budgets", "4", "30")
