"""Loading a model folder (scoring.core.model_loading): safetensors only for every loader, and one
copy of a backbone that scoring and training's features share while anything holds it."""
import gc
import shutil
import weakref

import pytest
import torch

from bench.tiny import build_tiny_backbone, build_tiny_prm
from scoring.core import model_loading, prm, training
from scoring.core.training_data import TrainConfig
from scoring.generation.generators import LocalGenerator


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    return build_tiny_backbone(tmp_path_factory.mktemp("loading") / "backbone")


@pytest.fixture
def pickle_only(backbone, tmp_path):
    """The backbone's folder with its weights as a pickle (never opened) instead of safetensors."""
    folder = tmp_path / "pickled"
    shutil.copytree(backbone, folder)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    return folder


@pytest.mark.parametrize("load", [
    pytest.param(lambda folder: model_loading.load_weights(folder, dtype=torch.float32), id="weights"),
    pytest.param(lambda folder: training.load_backbone(folder, device="cpu"), id="training"),
    pytest.param(lambda folder: training.load_backbone(folder, device="cpu", frozen=True), id="frozen"),
    pytest.param(lambda folder: LocalGenerator(folder, device="cpu"), id="generator"),
])
def test_a_folder_with_only_pickle_weights_is_refused_by_every_loader_naming_the_file(pickle_only, load):
    with pytest.raises(prm.ModelFormatError, match=r"pickle weights \(pytorch_model.bin\); only safetensors"):
        load(pickle_only)


def test_a_model_whose_backbone_holds_only_pickle_weights_is_refused(pickle_only, tmp_path):
    head = prm.save_head_model(tmp_path / "head", head=prm.StepHead(32), backbone=str(pickle_only))
    with pytest.raises(prm.ModelFormatError, match=r"pickle weights \(pytorch_model.bin\)"):
        prm.load_prm(head, device="cpu")


def test_frozen_training_features_read_the_backbone_scoring_already_holds(backbone, tmp_path):
    folder = prm.save_head_model(tmp_path / "head", head=prm.StepHead(32), backbone=str(backbone), layer=1)
    scoring = prm.load_prm(folder, device="cpu", dtype=torch.float32)
    frozen = training.load_backbone(backbone, device="cpu", dtype=torch.float32, frozen=True)
    assert frozen.model is scoring.model and frozen.tokenizer is scoring.tokenizer
    assert model_loading.is_shared(frozen.model)
    own = training.load_backbone(backbone, device="cpu", dtype=torch.float32)
    assert own.model is not scoring.model and not model_loading.is_shared(own.model)
    other_dtype = training.load_backbone(backbone, device="cpu", dtype=torch.bfloat16, frozen=True)
    assert other_dtype.model is not scoring.model


def test_the_shared_cache_keeps_no_backbone_alive_by_itself(tmp_path):
    folder = build_tiny_prm(tmp_path / "prm")
    gone = weakref.ref(prm.load_prm(folder, device="cpu", dtype=torch.float32).model)
    gc.collect()
    assert gone() is None


def test_training_that_changes_weights_refuses_a_shared_backbone(backbone):
    frozen = training.load_backbone(backbone, device="cpu", dtype=torch.float32, frozen=True)
    before = {name: p.detach().clone() for name, p in frozen.model.named_parameters()}
    with pytest.raises(ValueError, match="mode 'full' changes the backbone's weights, and this one is shared"):
        training.train([], backbone=frozen, config=TrainConfig(mode="full", epochs=1))
    assert all(torch.equal(p, before[name]) for name, p in frozen.model.named_parameters())


def test_a_rewritten_backbone_is_loaded_again_not_served_from_the_cache(tmp_path):
    folder = build_tiny_backbone(tmp_path / "backbone", seed=0)
    first = training.load_backbone(folder, device="cpu", dtype=torch.float32, frozen=True)
    build_tiny_backbone(tmp_path / "other", seed=1)
    # Replaced as a writer should (a new file renamed over it): the loaded model's mapped file stays as it was.
    (tmp_path / "other" / "model.safetensors").replace(folder / "model.safetensors")
    second = training.load_backbone(folder, device="cpu", dtype=torch.float32, frozen=True)
    assert second.model is not first.model
    pairs = zip(second.model.parameters(), first.model.parameters(), strict=True)
    assert not all(torch.equal(new, old) for new, old in pairs)  # the new file's weights
