"""Writing a trained version's folder in prm's format (the registry hashes and loads it)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from scoring.core import prm
from scoring.core.training.loop import TrainResult

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def save_checkpoint(
    result: TrainResult,
    folder: str | Path,
    *,
    parent_backbone: str | Path,
    tokenizer: PreTrainedTokenizerBase,
    separator: str = prm.DEFAULT_SEPARATOR,
    extra_meta: dict[str, Any] | None = None,
) -> Path:
    """Write the model folder in prm's format: head.safetensors + stepwise.json + meta.json.

    A head-only version references the parent's backbone folder (relative path) instead
    of copying 270 MB; a version with a trained backbone saves it (safetensors) inside.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if result.backbone is not None:
        result.backbone.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
        backbone = "."
    else:
        backbone = os.path.relpath(Path(parent_backbone).resolve(), folder.resolve())
    meta = {
        "config": asdict(result.config),
        "layer": result.layer,
        "data": result.data_snapshot(),
        "metrics": result.metrics,
        "loss_curve": result.loss_curve,
        "tokens": result.tokens,
        "seconds": result.seconds,
        "torch": torch.__version__,
    } | (extra_meta or {})
    return prm.save_head_model(
        folder, head=result.head, backbone=backbone, layer=result.layer, separator=separator, meta=meta
    )
