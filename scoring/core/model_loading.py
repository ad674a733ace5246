"""Loading a model folder: the one place Stepwise calls transformers' `from_pretrained`, and the
process's one cache of loaded backbones.

It owns the loading rules, so no caller spells them again:

- weights are safetensors only: every load checks the folder first
  (`model_files.check_safetensors_only`) and asks transformers for safetensors, so a pickle is
  never opened, and a folder holding only `.bin` weights is refused with a message naming them;
- a folder's own code never runs unless the caller passes `trust_remote_code` (the registry
  passes it only for a version an admin registered with it, under STEPWISE_ALLOW_TRUST_REMOTE_CODE);
- the device and the precision (`choose_device`, `choose_dtype`);
- which transformers class reads a model of each kind (`backbone_class`, `load_model`), Qwen's
  process reward architecture included (`scoring.core.process_reward`, no remote code).

A backbone that is only read (scoring, features for a head) comes from `shared_backbone`: one
object per (folder and its files, kind, dtype, device, remote code) while anything in the process holds it,
so the registry's versions on one backbone and a retrain reading features share one copy in
memory. The cache keeps nothing alive itself (weak references): its holders decide, the
registry's LRU first. A backbone that training changes is loaded fresh (`load_model`), never shared.

The model folder's on-disk format (stepwise.json, the head, hashes) is `scoring.core.model_files`,
which needs no torch; this module is plain PyTorch/transformers, no Django.
"""
from __future__ import annotations

import json
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from scoring.core.model_files import check_safetensors_only
from scoring.core.process_reward import ProcessRewardModel, is_process_reward

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

    Backbone = PreTrainedModel | ProcessRewardModel

# --- device and precision ------------------------------------------------------------------


def choose_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def choose_dtype(device: torch.device) -> torch.dtype:
    """Stepwise's one precision rule (unless STEPWISE_SCORING_DTYPE names one): float32 on a CPU,
    so that /api/score, rescoring, an export and its card's snippet agree to 1e-5 (bf16 moved a
    SmolLM2 head by up to 0.1, docs/checkpoints.md); bf16 on CUDA (fp16 where it has none)."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


# --- one folder's parts ------------------------------------------------------------------------


def load_tokenizer(folder: str | Path, *, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer  # transformers: only a process that loads a model pays its import

    tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
    return tokenizer


def load_config(folder: str | Path, *, trust_remote_code: bool = False) -> PretrainedConfig:
    from transformers import AutoConfig  # transformers: only a process that loads a model pays its import

    config: PretrainedConfig = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    return config


def load_weights(
    folder: str | Path, auto_class: type[_BaseAutoModelClass] | None = None, *, dtype: torch.dtype,
    device: torch.device | None = None, trust_remote_code: bool = False,
) -> PreTrainedModel:
    """A folder's safetensors weights as `auto_class` (AutoModel: the bare backbone), a copy of the
    caller's own, in eval mode, on `device` (the CPU unless given)."""
    if auto_class is None:
        from transformers import AutoModel  # transformers: only a process that loads a model pays its import

        auto_class = AutoModel
    check_safetensors_only(Path(folder))
    model: PreTrainedModel = auto_class.from_pretrained(
        folder, dtype=dtype, use_safetensors=True, trust_remote_code=trust_remote_code
    )
    module: nn.Module = model  # (transformers' own `to` and `eval` are untyped)
    module.eval()
    if device is not None:
        module.to(device)
    return model


def load_gguf(gguf: Path, *, dtype: torch.dtype) -> tuple[PreTrainedTokenizerBase, PreTrainedModel, PretrainedConfig]:
    """Tokenizer, causal LM (dequantised) and config of a GGUF file: the one load that is not safetensors,
    for the default model's backbone, converted once from the file an installed package ships."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # transformers: see load_tokenizer

    source, name = str(gguf.parent), gguf.name
    tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(source, gguf_file=name)
    model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(source, gguf_file=name, dtype=dtype)
    config: PretrainedConfig = AutoConfig.from_pretrained(source, gguf_file=name)
    return tokenizer, model, config


# --- the model a kind is ---------------------------------------------------------------------------


def backbone_class(kind: str) -> type[_BaseAutoModelClass]:
    """The transformers Auto class a model of this kind is loaded with."""
    import transformers  # transformers: seconds to import, and a head trained on stored features never needs it

    if kind == "head":
        return transformers.AutoModel
    if kind == "step_token":
        return transformers.AutoModelForCausalLM
    return transformers.AutoModelForTokenClassification


def build_model(kind: str, config: PretrainedConfig, *, trust_remote_code: bool = False) -> nn.Module:
    """The model a folder of this kind and config is, with fresh weights (meta device: shapes only)."""
    if is_process_reward(config):
        from transformers import AutoModel  # transformers: only a process that builds a model pays its import

        # from_config is untyped in transformers
        return ProcessRewardModel(cast(Any, AutoModel).from_config(config), config.num_labels or 2)
    model: nn.Module = cast(Any, backbone_class(kind)).from_config(config, trust_remote_code=trust_remote_code)
    return model


def load_model(
    folder: Path, kind: str, *, dtype: torch.dtype, trust_remote_code: bool = False
) -> PreTrainedModel | ProcessRewardModel:
    """The weights of a backbone folder as the model scoring reads (`build_model`'s class), a fresh copy."""
    if is_process_reward(load_config(folder, trust_remote_code=False)):
        return ProcessRewardModel.from_backbone(load_weights(folder, dtype=dtype), folder)
    return load_weights(folder, backbone_class(kind), dtype=dtype, trust_remote_code=trust_remote_code)


# --- the shared backbones ------------------------------------------------------------------------

# (folder, its files' stamp, kind, dtype, device, remote code) -> the loaded model, while anything holds it.
_models: weakref.WeakValueDictionary[tuple[str, str, str, str, str, bool], nn.Module] = weakref.WeakValueDictionary()
_tokenizers: weakref.WeakKeyDictionary[nn.Module, PreTrainedTokenizerBase] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def shared_backbone(
    folder: str | Path, kind: str, *, device: torch.device, dtype: torch.dtype, trust_remote_code: bool = False
) -> tuple[Backbone, PreTrainedTokenizerBase]:
    """The backbone and tokenizer of a folder on `device`, in eval mode, for reading only: the
    object this process already holds for the same weights, kind, dtype and device, else loaded now."""
    folder = Path(folder).resolve()
    check_safetensors_only(folder)
    key = (str(folder), _files_stamp(folder), kind, str(dtype), str(device), trust_remote_code)
    with _lock:  # two threads asking at once load it once
        model = _models.get(key)
        if model is None:
            tokenizer = load_tokenizer(folder, trust_remote_code=trust_remote_code)
            model = load_model(folder, kind, dtype=dtype, trust_remote_code=trust_remote_code)
            nn.Module.to(model, device).eval()
            _models[key], _tokenizers[model] = model, tokenizer
        return cast("Backbone", model), _tokenizers[model]


def _files_stamp(folder: Path) -> str:
    """(name, size, mtime) of the files a load reads: rewritten weights or tokenizer are a new key,
    at the price of a stat (hashing the weights takes a second per 270 MB)."""
    files = sorted(p for p in folder.iterdir() if p.suffix == ".safetensors" or p.name.endswith(".json"))
    return json.dumps([(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files])


def is_shared(model: nn.Module) -> bool:
    """Whether `model` is a shared backbone (others read it: its weights must not change)."""
    return model in _tokenizers
