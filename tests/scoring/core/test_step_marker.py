"""The step marker survives whole-text tokenization; Stepwise, its export and the card's snippet
read the same probabilities under one precision rule."""
import json
import re
import subprocess
import sys

import pytest
import torch
from django.core.management import CommandError, call_command

from bench.pooling_server import PoolingModel
from bench.tiny import build_tiny_prm, build_tiny_tokenizer
from scoring.core import prm, step_marker
from scoring.core.model_files import ModelFormatError
from scoring.models import StepScore
from scoring.rescoring import rescore, scores
from scoring.store import model_card, registry
from scoring.store.checkpoint_export import export_checkpoint
from tests.conftest import TEST_DATA
from tests.factories import SolutionFactory

REAL_TEXTS = step_marker.boundary_texts(TEST_DATA / "model-responses")  # real model responses, in steps

THREE_STEPS = ("What is 12 + 7?", ["First add the ones: 2 + 7 = 9.", "Then the tens: 10.", "So 12 + 7 = 19."])


def test_a_blank_line_separator_merges_with_its_neighbours_and_the_marker_does_not():
    tokenizer = build_tiny_tokenizer(step_marker=True)
    assert step_marker.check_step_boundaries(tokenizer, step_marker.STEP_MARKER, REAL_TEXTS) == []
    problems = step_marker.check_step_boundaries(tokenizer, "\n\n", step_marker.BUILT_IN_TEXTS)
    assert problems and "for 3 steps in 'What is 12 + 7?" in problems[0]


def test_a_pooling_server_finds_one_row_per_step_with_the_marker(tmp_path):
    folder = build_tiny_prm(tmp_path / "prm", kind="head", layer=1, step_marker=True)
    server = PoolingModel(folder, served_name="m", dtype="float32")
    text = step_marker.whole_text(*THREE_STEPS, separator=step_marker.STEP_MARKER)
    status, answer = server.pool({"model": "m", "input": [text], "task": "token_classify"})
    rows = answer["data"][0]["data"]
    local = prm.load_prm(folder, device="cpu", dtype=torch.float32).step_probabilities([THREE_STEPS])[0]
    assert status == 200 and len(rows) == 3
    assert [row[1] for row in rows] == pytest.approx([s.p for s in local], abs=1e-6)


def test_a_version_whose_separator_fails_is_refused_at_export_naming_the_text(tmp_path):
    folder = build_tiny_prm(tmp_path / "old", kind="head", layer=1)  # "\n\n", as versions before the marker
    model = prm.load_prm(folder, device="cpu")  # still scores locally, piece by piece
    assert len(model.step_probabilities([THREE_STEPS])[0]) == 3
    with pytest.raises(ModelFormatError, match=r"does not survive whole-text tokenization.*step tags"):
        export_checkpoint(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_register_model_refuses_a_separator_that_merges(tmp_path, db):
    folder = build_tiny_prm(tmp_path / "tc", kind="token_classification")
    (folder / "stepwise.json").unlink()
    with pytest.raises(CommandError, match="does not survive whole-text tokenization"):
        call_command("register_model", str(folder), "--style", "token_classification", "--separator", "\n\n")


def test_a_text_holding_the_marker_itself_is_refused_rather_than_misread(tmp_path):
    folder = build_tiny_prm(tmp_path / "prm", kind="head", layer=1, step_marker=True)
    model = prm.load_prm(folder, device="cpu")
    with pytest.raises(ModelFormatError, match="2 step tags .* for 1 steps: the text holds the tag itself"):
        model.step_probabilities([("P", [f"a {step_marker.STEP_MARKER} b"])])


def test_cpu_scores_are_float32_by_the_one_precision_rule():
    assert prm.choose_dtype(torch.device("cpu")) == torch.float32


def run_card_snippet(folder):
    card = (folder / "README.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", card, re.S).group(1)
    done = subprocess.run([sys.executable, "-c", snippet], cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["token_classification", "step_token"])
@pytest.mark.slow
def test_api_rescoring_export_and_the_cards_snippet_agree_on_cpu(tmp_path, db, settings, kind):
    settings.STEPWISE_SCORING_DTYPE = "auto"  # the rule itself, not a pinned dtype
    registry.forget_loaded()
    folder = build_tiny_prm(tmp_path / "v", kind="head", layer=1, step_marker=True)
    version = registry.register_model_version(name="v", path=folder)
    problem, steps = model_card.EXAMPLE_PROBLEM, model_card.EXAMPLE_STEPS
    api = [row["p"] for row in rescore.score_texts(items=[(problem, steps)], model_version=version)[0]]

    solution = SolutionFactory(steps=steps, problem__statement=problem)
    scores.score_solutions(model_version=version, solution_ids=[solution.pk])
    stored = [StepScore.objects.get(model_version=version, step=step).p for step in solution.steps.order_by("index")]

    call_command("export_model", "v", str(tmp_path / "export"), "--as", kind)
    exported = prm.load_prm(tmp_path / "export", device="cpu")
    assert exported.dtype == torch.float32
    export = [s.p for s in exported.step_probabilities([(problem, steps)])[0]]
    snippet = run_card_snippet(tmp_path / "export")
    worst = max(abs(a - b) for other in (stored, export, snippet) for a, b in zip(api, other, strict=True))
    assert worst < 1e-5, f"max |dp| = {worst}"
    registry.forget_loaded()


def test_the_default_models_conversion_adds_a_marker_read_as_a_blank_line(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench.tiny import build_tiny_backbone
    from scoring.store.default_model import add_step_marker

    folder = build_tiny_backbone(tmp_path / "b")
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    add_step_marker(model, tokenizer)
    marker = step_marker.marker_id(tokenizer, step_marker.STEP_MARKER)
    blank = tokenizer("\n\n", add_special_tokens=False)["input_ids"][-1]
    assert marker == len(tokenizer) - 1 == model.get_input_embeddings().weight.shape[0] - 1
    assert torch.equal(model.get_input_embeddings().weight[marker], model.get_input_embeddings().weight[blank])
    assert step_marker.check_step_boundaries(tokenizer, step_marker.STEP_MARKER, REAL_TEXTS) == []
