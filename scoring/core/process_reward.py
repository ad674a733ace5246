"""Qwen2.5-Math-PRM's `Qwen2ForProcessRewardModel`, restated so it loads with no remote code.

The checkpoint ships its modeling file as remote code, which Stepwise never runs; this module
defines the same model (vLLM's qwen2_rm.py has the same shape): the stock base model through
transformers, and the two-layer `score` head read from the checkpoint's safetensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from scoring.core.model_files import ModelFormatError

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel


# config.json architectures that `ProcessRewardModel` loads (every one a base model + `score` MLP).
PROCESS_REWARD_ARCHITECTURES = ("Qwen2ForProcessRewardModel",)


@dataclass
class TokenLogits:
    logits: torch.Tensor  # [batch, tokens, num_labels], what a token classifier's output holds


class ProcessRewardModel(nn.Module):
    """Qwen2ForProcessRewardModel (Qwen2.5-Math-PRM's modeling_qwen2_rm.py, restated): the base
    model (`model.*`), then on every token `score` = Linear(H, H), ReLU, Linear(H, num_labels)."""

    def __init__(self, backbone: PreTrainedModel, num_labels: int):
        super().__init__()
        self.model = backbone
        self.config = backbone.config
        hidden = int(backbone.config.hidden_size)
        self.score = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_labels))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> TokenLogits:
        states = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return TokenLogits(logits=self.score(states))

    @classmethod
    def from_backbone(cls, backbone: PreTrainedModel, folder: Path) -> ProcessRewardModel:
        """The base model (loaded by `scoring.core.model_loading`, no remote code: `model_type` names
        a stock class) with the `score.*` tensors from the checkpoint's safetensors; a missing one is
        refused, never initialised."""
        model = cls(backbone, int(backbone.config.num_labels or 2))
        state = _checkpoint_tensors(folder, prefix="score.")
        missing = sorted(f"score.{name}" for name in set(model.score.state_dict()) - set(state))
        if missing:
            raise ModelFormatError(f"{folder}: the checkpoint has no {', '.join(missing)} (the process reward head)")
        model.score.load_state_dict(state)
        return model.to(backbone.dtype)


def _checkpoint_tensors(folder: Path, *, prefix: str) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors whose names start with `prefix` (the prefix cut), from every shard."""
    from safetensors import safe_open

    found: dict[str, torch.Tensor] = {}
    for path in sorted(folder.glob("model*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():
                if name.startswith(prefix):
                    found[name.removeprefix(prefix)] = handle.get_tensor(name)
    return found


def is_process_reward(config: PretrainedConfig) -> bool:
    return any(name in PROCESS_REWARD_ARCHITECTURES for name in getattr(config, "architectures", None) or [])
