"""Exporting a head version as a standard checkpoint: plain transformers and Stepwise read the
same step scores as the version itself, at an intermediate layer and at the last one."""
import json
import os
import zipfile

import pytest
import torch
from django.core.management import call_command
from django.urls import reverse

from bench.tiny import build_tiny_prm
from scoring.core import encoding, prm
from scoring.core.step_marker import STEP_MARKER
from scoring.store import model_exports, registry
from scoring.store.checkpoint_export import export_checkpoint
from scoring.tasks import export_model_task
from tests.conftest import wait_for

ITEMS = [
    ("What is 12 + 7?", ["First add the ones: 2 + 7 = 9.", "Then the tens: 10.", "So 12 + 7 = 19."]),
    ("We factor x^2 - 5x + 6.", ["(x - 2)(x - 3)", "so the roots are 2 and 3."]),
]


def spread_head(folder):
    """The tiny head made affine-equivalent to logits of mean 0.3 and spread 2 on ITEMS, so its
    scores span (0, 1) rather than all sitting at one end (a random head's logit is mostly offset)."""
    config = prm.read_model_config(folder)
    model = prm.load_prm(folder, device="cpu", dtype=torch.float32)
    features = torch.cat(model.step_features(ITEMS, layer=config["head"]["layer"]))
    head = prm.StepHead.load(folder, config["head"])
    with torch.no_grad():
        z = head.mu(features).squeeze(-1)
        gain = 2.0 / z.std()
        head.mu.weight.mul_(gain)
        head.mu.bias.copy_((head.mu.bias - z.mean()) * gain + 0.3)
    head.save(folder)
    return folder


def head_version(tmp_path, *, layer, head_type="point"):
    folder = build_tiny_prm(tmp_path / f"v-{layer}-{head_type}", kind="head", head_type=head_type, layer=layer,
                            step_marker=True)
    return spread_head(folder)


def stepwise_scores(folder):
    model = prm.load_prm(folder, device="cpu", dtype=torch.float32)
    return [[s.p for s in steps] for steps in model.step_probabilities(ITEMS)]


def plain_transformers_scores(folder, kind):
    """By hand, from the plain model's logits at the step positions: no Stepwise read-out code."""
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

    config = json.loads((folder / "stepwise.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    auto = AutoModelForCausalLM if kind == "step_token" else AutoModelForTokenClassification
    model = auto.from_pretrained(folder, dtype=torch.float32, trust_remote_code=False).eval()
    scores = []
    for encoded in encoding.encode_many(tokenizer, ITEMS, separator=config["separator"]):
        assert all(encoded.ids[p] == config["step_tag_id"] for p in encoded.positions)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([encoded.ids])).logits[0, encoded.positions]
        if kind == "step_token":
            pair = logits[:, [config["good_token_id"], config["bad_token_id"]]]
            scores.append(pair.softmax(-1)[:, 0].tolist())
        else:
            scores.append(logits.softmax(-1)[:, 1].tolist())
    return scores


def assert_close(got, want, tol=1e-4):
    assert [len(s) for s in got] == [len(s) for s in want]
    worst = max(abs(a - b) for gs, ws in zip(got, want) for a, b in zip(gs, ws))
    assert worst < tol, f"max |dp| = {worst}"


@pytest.mark.parametrize("kind", ["token_classification", "step_token"])
@pytest.mark.parametrize("layer", [1, None], ids=["intermediate-layer", "last-layer"])
def test_export_scores_equal_the_version_in_plain_transformers_and_back_in_stepwise(tmp_path, kind, layer):
    version = head_version(tmp_path, layer=layer)
    want = stepwise_scores(version)
    assert max(p for s in want for p in s) - min(p for s in want for p in s) > 0.1  # scores that can differ
    exported = export_checkpoint(version, tmp_path / "out", as_kind=kind)
    assert_close(plain_transformers_scores(exported.folder, kind), want)
    assert_close(stepwise_scores(exported.folder), want)
    assert prm.read_model_config(exported.folder)["kind"] == kind


def test_a_beta_head_exports_its_mean(tmp_path):
    version = head_version(tmp_path, layer=1, head_type="beta")
    model = prm.load_prm(version, device="cpu", dtype=torch.float32)
    means = [[s.mean for s in steps] for steps in model.step_probabilities(ITEMS)]
    exported = export_checkpoint(version, tmp_path / "out", as_kind="token_classification")
    assert_close(plain_transformers_scores(exported.folder, "token_classification"), means)


def test_the_export_holds_safetensors_config_tokenizer_and_card_and_no_pickle(tmp_path):
    exported = export_checkpoint(head_version(tmp_path, layer=1), tmp_path / "out", as_kind="step_token")
    names = {p.name for p in exported.folder.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md", "stepwise.json"} <= names
    assert not [n for n in names if n.endswith(prm.PICKLE_SUFFIXES)]
    assert "auto_map" not in json.loads((exported.folder / "config.json").read_text())
    card = (exported.folder / "README.md").read_text()
    config = exported.config
    for fact in (f"id **{config['step_tag_id']}**", f"good token id {config['good_token_id']}",
                 "--serve-as vllm"):
        assert fact in card
    assert "vllm serve" not in card  # vLLM would not read a causal LM's lm_head rows (test_vllm_pooling)


def test_exporting_into_an_existing_folder_is_refused_and_writes_nothing(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(FileExistsError):
        export_checkpoint(head_version(tmp_path, layer=1), tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_other_architectures_export_a_last_layer_head_and_refuse_an_intermediate_one_with_the_reason(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from bench.tiny import build_tiny_tokenizer
    from scoring.core.model_files import ModelFormatError

    tokenizer = build_tiny_tokenizer(step_marker=True)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, bos_token_id=tokenizer.bos_token_id)
    for layer in (None, 1):
        folder = tmp_path / f"qwen-{layer}"
        Qwen2ForCausalLM(config).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        prm.save_head_model(folder, head=prm.StepHead(32), backbone=".", layer=layer, separator=STEP_MARKER)
    exported = export_checkpoint(tmp_path / "qwen-None", tmp_path / "out", as_kind="token_classification")
    assert_close(plain_transformers_scores(exported.folder, "token_classification"),
                 stepwise_scores(tmp_path / "qwen-None"))
    with pytest.raises(ModelFormatError, match="Llama-architecture backbone"):
        export_checkpoint(tmp_path / "qwen-1", tmp_path / "out-1")
    assert not (tmp_path / "out-1").exists()


@pytest.fixture
def version(db, tmp_path, settings):
    settings.STEPWISE_SCORING_DTYPE = "float32"
    registry.forget_loaded()
    folder = build_tiny_prm(tmp_path / "tiny-head", kind="head", layer=1, step_marker=True)
    yield registry.register_model_version(name="tiny head", path=folder, metrics={"evaluation": {"step_auc": 0.71}})
    registry.forget_loaded()


def test_export_model_command_writes_a_card_with_the_versions_evaluation(version, tmp_path):
    call_command("export_model", version.name, str(tmp_path / "export"), "--as", "token_classification")
    card = (tmp_path / "export" / "README.md").read_text()
    assert "# tiny head" in card and "evaluation.step_auc | 0.71" in card
    assert_close(stepwise_scores(tmp_path / "export"), stepwise_scores(version.path))


def test_the_card_counts_the_training_runs_labels_and_their_generations(version, tmp_path):
    from annotate.models import Annotation
    from scoring.models import TrainingRun
    from tests.factories import SolutionFactory

    for index, generation in enumerate([0, 2, 2, None]):
        Annotation.objects.create(solution=SolutionFactory(), labeler=f"l{index}", generation=generation,
                                  status=Annotation.Status.SUBMITTED, finish_reason="solution")
    TrainingRun.objects.create(result=version, n_labels=4, state="succeeded", active_slot=None)
    facts = model_exports.version_facts(version)
    assert facts["n_labels"] == 4 and facts["generations"] == [0, 2]
    card = (model_exports.export_version(version=version, out=tmp_path / "out", as_kind="step_token").folder
            / "README.md").read_text()
    assert "labels from queue generations 0, 2" in card and "4 trainable annotations" in card


def test_models_page_download_is_for_admins_only(version, client, admin_user, annotator, settings, tmp_path):
    settings.EXPORTS_DIR = tmp_path / "exports"
    url = reverse("scoring:download-model", args=[version.pk, "step_token"])
    client.force_login(admin_user)
    assert client.get(url).status_code == 404  # not built yet
    stale = tmp_path / "exports" / "models" / ".work-killed"  # what a worker killed mid-export leaves
    stale.mkdir(parents=True)
    os.utime(stale, (0, 0))
    export_model_task(version.pk, "step_token")  # the task as a plain function; a rerun is a no-op
    assert not stale.exists()
    assert "Export token_classification" in client.get(reverse("scoring:models")).content.decode()
    response = client.get(url)
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    archive = tmp_path / "got.zip"
    archive.write_bytes(b"".join(response.streaming_content))
    names = zipfile.ZipFile(archive).namelist()
    assert any(n.endswith("/model.safetensors") for n in names)
    assert not [n for n in names if n.endswith(prm.PICKLE_SUFFIXES)]
    client.force_login(annotator)
    assert client.get(url).status_code == 403
    export_url = reverse("scoring:export-model", args=[version.pk])
    assert client.post(export_url, {"as": "step_token"}).status_code == 403


def test_the_models_page_export_button_builds_the_archive_on_a_real_worker(
    celery_worker_process, client, admin_user, tmp_path
):
    registry.forget_loaded()
    folder = build_tiny_prm(tmp_path / "tiny-worker", kind="head", layer=1, seed=7, step_marker=True)
    version = registry.register_model_version(name="worker export", path=folder)
    model_exports.archive_path(version, "token_classification").unlink(missing_ok=True)
    client.force_login(admin_user)
    response = client.post(reverse("scoring:export-model", args=[version.pk]), {"as": "token_classification"},
                           follow=True)
    assert "Building the token_classification checkpoint" in response.content.decode()
    url = reverse("scoring:download-model", args=[version.pk, "token_classification"])
    wait_for(lambda: client.get(url).status_code == 200, timeout=90)
    assert model_exports.finished_archive(version, "token_classification") is not None
