"""Registering public PRM checkpoint folders (Math-Shepherd, Qwen2.5-Math-PRM style, our own
exports) as model versions that score the pool through the rescore path."""
import json

import pytest
import torch
from django.core.management import CommandError, call_command

from bench.tiny import build_tiny_backbone, build_tiny_prm, build_tiny_tokenizer, tiny_llama_config
from scoring.models import ModelVersion, StepScore
from scoring.rescoring import scores
from scoring.store import registry
from scoring.store.checkpoint_export import export_checkpoint
from tests.factories import SolutionFactory
from tests.scoring.core.test_public_formats import (
    math_shepherd_folder,
    mistral_style_tokenizer,
    qwen_card_scores,
    qwen_math_prm_folder,
    qwen_style_tokenizer,
)

STEPS = [["First add the ones: 2 + 7 = 9.", "Then the tens: 10."], ["So x = 4.", "# Answer 4", "Done."]]


@pytest.fixture(autouse=True)
def float32_scoring(settings):
    settings.STEPWISE_SCORING_DTYPE = "float32"
    registry.forget_loaded()
    yield
    registry.forget_loaded()


@pytest.fixture
def pool(db):
    return [SolutionFactory(steps=steps) for steps in STEPS]


def qwen_style_folder(folder, *, with_tag=True):
    """A tiny stock 2-label token classifier whose tokenizer is built to Qwen2.5's rules (`<extra_0>`
    unless `with_tag` is false, its chat template)."""
    from transformers import LlamaForTokenClassification

    tokenizer = qwen_style_tokenizer() if with_tag else build_tiny_tokenizer()
    tokenizer.chat_template = tokenizer.chat_template or qwen_style_tokenizer().chat_template
    torch.manual_seed(3)
    LlamaForTokenClassification(tiny_llama_config(tokenizer, num_labels=2)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def scores_by_hand(folder, version, solutions):
    """P(good) per step from the plain model's logits at the positions of the step tag."""
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

    from scoring.core.encoding import encode

    config = version.config
    auto = AutoModelForCausalLM if config["kind"] == "step_token" else AutoModelForTokenClassification
    model = auto.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    result = []
    for solution in solutions:
        steps = [s.text for s in solution.steps.order_by("index")]
        encoded = encode(tokenizer, solution.problem.statement, steps, separator=config["separator"],
                         input_format=config.get("input_format", "stepwise"))
        assert [encoded.ids[p] for p in encoded.positions] == [config["step_tag_id"]] * len(steps)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([encoded.ids])).logits[0, encoded.positions]
        if config["kind"] == "step_token":
            result.extend(logits[:, [config["good_token_id"], config["bad_token_id"]]].softmax(-1)[:, 0].tolist())
        else:
            result.extend(logits.softmax(-1)[:, 1].tolist())
    return result


def stored_scores(version, solutions):
    return [
        StepScore.objects.get(model_version=version, step=step).p
        for solution in solutions for step in solution.steps.order_by("index")
    ]


def test_a_math_shepherd_folder_reads_plus_and_minus_at_the_tag_and_scores_the_pool(tmp_path, pool):
    folder = math_shepherd_folder(tmp_path / "math-shepherd")  # Mistral; ки, + and - one token each
    call_command("register_model", str(folder), "--style", "math_shepherd")
    version = ModelVersion.objects.get(name="math-shepherd")
    tokenizer = mistral_style_tokenizer()
    assert version.kind == "step_token" and version.config["input_format"] == "math_shepherd"
    assert version.config["step_tag_id"] == tokenizer.convert_tokens_to_ids("▁ки")
    assert version.config["good_token_id"] == tokenizer.convert_tokens_to_ids("▁+")
    assert version.config["bad_token_id"] == tokenizer.convert_tokens_to_ids("▁-")
    assert scores.score_solutions(model_version=version, solution_ids=[s.pk for s in pool]) == len(pool)
    want = scores_by_hand(folder, version, pool)
    assert stored_scores(version, pool) == pytest.approx(want, abs=1e-5)


def test_a_qwen_prm_style_folder_reads_softmax_1_at_extra_0(tmp_path, pool):
    folder = qwen_style_folder(tmp_path / "qwen-prm")
    call_command("register_model", str(folder), "--style", "qwen_prm", "--name", "qwen-like")
    version = ModelVersion.objects.get(name="qwen-like")
    assert version.kind == "token_classification" and version.config["separator"] == "<extra_0>"
    assert not version.trust_remote_code
    scores.score_solutions(model_version=version, solution_ids=[s.pk for s in pool])
    assert stored_scores(version, pool) == pytest.approx(scores_by_hand(folder, version, pool), abs=1e-5)


def test_a_folder_without_the_styles_tag_is_refused_and_left_as_it_was(tmp_path, db):
    folder = qwen_style_folder(tmp_path / "no-tag", with_tag=False)
    with pytest.raises(CommandError, match="<extra_0>"):
        call_command("register_model", str(folder), "--style", "qwen_prm")
    assert not (folder / "stepwise.json").exists() and not ModelVersion.objects.exists()


def test_a_label_token_that_is_several_tokens_is_refused_by_name(tmp_path, db):
    folder = math_shepherd_folder(tmp_path / "ms")
    with pytest.raises(CommandError, match="--good-token 'correct and proper'"):
        call_command("register_model", str(folder), "--style", "math_shepherd", "--good-token", "correct and proper")
    assert not (folder / "stepwise.json").exists()


def test_remote_code_is_refused_unless_the_deployment_allows_it(tmp_path, db, settings):
    settings.STEPWISE_ALLOW_TRUST_REMOTE_CODE = False
    folder = qwen_style_folder(tmp_path / "qwen")
    with pytest.raises(CommandError, match="STEPWISE_ALLOW_TRUST_REMOTE_CODE"):
        call_command("register_model", str(folder), "--style", "qwen_prm", "--trust-remote-code")
    assert not ModelVersion.objects.exists()


@pytest.mark.parametrize("kind", ["step_token", "token_classification"])
def test_an_exported_version_registers_back_and_rescores_the_pool_with_the_same_scores(tmp_path, pool, kind):
    head = registry.register_model_version(
        name="head", path=build_tiny_prm(tmp_path / "head", kind="head", head_type="beta", layer=1, step_marker=True)
    )
    exported = export_checkpoint(head.path, tmp_path / "exported", as_kind=kind)
    call_command("register_model", str(exported.folder), "--style", kind)
    back = ModelVersion.objects.get(name="exported")
    assert back.config == json.loads((exported.folder / "stepwise.json").read_text())  # ids read from the folder
    ids = [s.pk for s in pool]
    scores.score_solutions(model_version=head, solution_ids=ids)
    scores.score_solutions(model_version=back, solution_ids=ids)
    assert stored_scores(back, pool) == pytest.approx(stored_scores(head, pool), abs=1e-4)


def test_a_folder_of_the_wrong_model_class_is_refused_naming_its_architecture(tmp_path, db):
    folder = build_tiny_backbone(tmp_path / "causal")  # a causal LM, not a token classifier
    with pytest.raises(CommandError, match=r"LlamaForCausalLM.*ForTokenClassification"):
        call_command("register_model", str(folder), "--style", "qwen_prm")
    assert not (folder / "stepwise.json").exists() and not ModelVersion.objects.exists()


def test_a_qwen_math_prm_folder_registers_without_remote_code_and_scores_the_pool_as_its_card(tmp_path, pool):
    folder = qwen_math_prm_folder(tmp_path / "qwen-math-prm")  # Qwen2ForProcessRewardModel, remote code in auto_map
    call_command("register_model", str(folder), "--style", "qwen_prm")
    version = ModelVersion.objects.get(name="qwen-math-prm")
    assert version.config["input_format"] == "qwen_prm" and not version.trust_remote_code
    scores.score_solutions(model_version=version, solution_ids=[s.pk for s in pool])
    want = [p for s in pool for p in qwen_card_scores(folder, s.problem.statement,
                                                      [step.text for step in s.steps.order_by("index")])]
    assert stored_scores(version, pool) == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("remote_code", [False, True])
def test_a_checkpoint_lacking_weights_its_architecture_needs_is_refused_at_registration(
    tmp_path, db, settings, remote_code
):
    settings.STEPWISE_ALLOW_TRUST_REMOTE_CODE = True
    folder = qwen_math_prm_folder(tmp_path / "qwen-math-prm", head=("score.0.weight", "score.2.weight"))
    options = ["--trust-remote-code"] if remote_code else []
    with pytest.raises(CommandError, match=r"initialised at random: score\.0\.bias, score\.2\.bias"):
        call_command("register_model", str(folder), "--style", "qwen_prm", *options)
    assert not (folder / "stepwise.json").exists() and not ModelVersion.objects.exists()


def test_an_architecture_transformers_cannot_build_is_refused_at_registration(tmp_path, db):
    folder = qwen_math_prm_folder(tmp_path / "qwen-math-prm")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"hidden_act": "no_such_activation"}))
    with pytest.raises(CommandError, match="cannot build this model as ProcessRewardModel"):
        call_command("register_model", str(folder), "--style", "qwen_prm")
    assert not (folder / "stepwise.json").exists() and not ModelVersion.objects.exists()
