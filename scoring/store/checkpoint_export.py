"""A Stepwise head version written out as a standard transformers checkpoint (no custom code).

Two shapes, both read at the last token of the step separator, as Stepwise reads:

- `token_classification`: `AutoModelForTokenClassification`, 2 labels, logits [0, z], so
  softmax(...)[1] = sigmoid(z) = the head's P(good) (Qwen2.5-Math-PRM / TRL style).
- `step_token`: `AutoModelForCausalLM` whose lm_head rows give logit z to the good token and 0
  to the bad one, so softmax over (good, bad) = (sigmoid(z), 1 - sigmoid(z)) (Math-Shepherd style).

Here z = mu·h + b is the head's logit (a beta head exports its mean; its reliability is dropped).

Why it needs a construction: the head reads the raw residual stream h = hidden_states[L] at an
intermediate layer L, while any stock classifier reads the *final-normed* state, and RMSNorm
removes the scale a linear head depends on (and leaves no constant for its bias). Exact answer
for a Llama backbone: keep the first L layers, widen the residual stream by one dimension that the
original layers never read or write (every norm's eps and weight rescaled so that the wider mean
changes nothing), and append one layer whose attention output bias writes a constant C = 2^20 into
that dimension. The final RMSNorm then divides by ~C/sqrt(H'), the same for every input up to
|h|^2/C^2 (below float32's resolution), so the normed state is linear in h, with a constant
coordinate that carries the bias. A head on the final-normed state (layer None or the last layer)
is plain for token classification; for step_token one more appended layer computes z from the
normed state in its MLP (silu(z) - silu(-z) = z, exactly) into a second extra dimension.

Plain PyTorch/transformers, no Django: `scoring.store.model_exports` feeds it a version and its facts.
"""
from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForTokenClassification,
    AutoTokenizer,
    LlamaConfig,
)

from scoring.core import prm, step_marker
from scoring.core.model_files import EXPORT_KINDS, ModelFormatError, write_model_config
from scoring.store.model_card import write_model_card

CONSTANT = 2.0**20  # exact in bf16/fp32; float16 (max 65504) cannot hold it
GOOD_TOKEN, BAD_TOKEN = "+", "-"


@dataclass
class ExportedCheckpoint:
    folder: Path
    kind: str
    config: dict  # the stepwise.json written into it
    construction: str  # "plain" or "linearized" (see the module docstring)


def export_checkpoint(
    model_folder: str | Path, out: str | Path, *, as_kind: str = "token_classification", facts: dict | None = None,
) -> ExportedCheckpoint:
    """Write `out` (must not exist): safetensors, config.json, tokenizer, README.md, stepwise.json."""
    if as_kind not in EXPORT_KINDS:
        raise ValueError(f"--as must be one of {EXPORT_KINDS}, not {as_kind!r}")
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} already exists; choose a new folder")
    folder = Path(model_folder).resolve()
    config = prm.read_model_config(folder)
    if config["kind"] != "head":
        raise ModelFormatError(
            f"{folder}: kind {config['kind']!r} is already a standard checkpoint (its backbone folder); "
            "only 'head' versions need exporting"
        )
    backbone = prm.backbone_folder(folder, config)
    _check_plain_weights(backbone)
    head = prm.StepHead.load(folder, config["head"])
    base = AutoModel.from_pretrained(backbone, dtype=torch.float32, use_safetensors=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    separator = config.get("separator", prm.DEFAULT_SEPARATOR)
    step_marker.require_step_marker(tokenizer, separator, where=str(folder))
    readout = HeadReadout.of(head, layer=config["head"].get("layer"), num_layers=base.config.num_hidden_layers)
    ids = _token_ids(tokenizer, separator, as_kind)
    model, construction = build_standard_model(base, readout, as_kind=as_kind, good_token_id=ids.get("good_token_id"))
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    stepwise_config = {"kind": as_kind, "backbone": ".", "separator": separator} | ids
    write_model_config(partial, stepwise_config)
    exported = ExportedCheckpoint(folder=out, kind=as_kind, config=stepwise_config, construction=construction)
    write_model_card(partial, exported, head_type=head.head_type, layer=readout.layer, facts=facts or {})
    partial.rename(out)  # last: a crash leaves a .partial folder, never a half-written export
    return exported


def _check_plain_weights(backbone: Path) -> None:
    prm.check_safetensors_only(backbone)
    # Training merges LoRA before saving (loop.merge_and_unload), so a version never holds an
    # adapter; a folder that does was made elsewhere and is refused rather than half-exported.
    if (backbone / "adapter_config.json").exists():
        raise ModelFormatError(f"{backbone} is a LoRA adapter; merge it (peft merge_and_unload) before exporting")


def _token_ids(tokenizer, separator: str, as_kind: str) -> dict:
    """The step marker's id (vLLM's step_tag_id) and, for step_token, the label tokens."""
    ids = {"step_tag_id": step_marker.step_tag_id(tokenizer, separator)}
    if as_kind == "token_classification":
        return ids | {"positive_label": 1}
    good, bad = (tokenizer.convert_tokens_to_ids(t) for t in (GOOD_TOKEN, BAD_TOKEN))
    if not isinstance(good, int) or not isinstance(bad, int) or good == bad or tokenizer.unk_token_id in (good, bad):
        good, bad = 0, 1  # no single '+'/'-' tokens: any two distinct ids serve, the card names them
    return ids | {"good_token_id": good, "bad_token_id": bad, "step_tag": separator}


# --- the read-out as weights -----------------------------------------------------------------


@dataclass
class HeadReadout:
    """z = weight·feature + bias, where feature is hidden_states[layer] (raw residual) or, when
    `normed`, the final-normed last state (what layer None / the last layer reads)."""

    weight: torch.Tensor  # [H]
    bias: float
    layer: int | None
    normed: bool

    @classmethod
    def of(cls, head: prm.StepHead, *, layer: int | None, num_layers: int) -> HeadReadout:
        weight = head.mu.weight.detach().float()[0]
        normed = layer is None or layer >= num_layers
        return cls(weight=weight, bias=float(head.mu.bias.detach()[0]), layer=layer, normed=normed)


def build_standard_model(base, readout: HeadReadout, *, as_kind: str, good_token_id: int | None):
    """The export model (float32) computing the readout's logit at every position; see the docstring."""
    if readout.normed and as_kind == "token_classification":
        return _plain_token_classifier(base, readout), "plain"
    if base.config.model_type != "llama":
        raise ModelFormatError(
            f"exporting a head at layer {readout.layer} needs a Llama-architecture backbone "
            f"(SmolLM2, Llama); this one is {base.config.model_type!r}"
        )
    return _linearized_llama(base, readout, as_kind=as_kind, good_token_id=good_token_id), "linearized"


def _plain_token_classifier(base, readout: HeadReadout):
    config = base.config.__class__.from_dict(base.config.to_dict() | {"num_labels": 2})
    model = AutoModelForTokenClassification.from_config(config, dtype=torch.float32)
    getattr(model, model.base_model_prefix).load_state_dict(base.state_dict())
    classifier = model.score if hasattr(model, "score") else model.classifier
    with torch.no_grad():
        classifier.weight.zero_()
        classifier.weight[1] = readout.weight
        classifier.bias.copy_(torch.tensor([0.0, readout.bias]))
    return model.eval()


def _linearized_llama(base, readout: HeadReadout, *, as_kind: str, good_token_id: int | None):
    hidden = base.config.hidden_size
    # (`layer is None` only where normed: the test is for the type checker.)
    kept = base.config.num_hidden_layers if readout.normed or readout.layer is None else readout.layer
    extra = 2 if readout.normed else 1  # [z dimension,] constant dimension
    config = _widened_config(base.config, layers=kept + extra, extra=extra, mlp_bias=readout.normed)
    wide = config.hidden_size
    model_class = AutoModelForCausalLM if as_kind == "step_token" else AutoModelForTokenClassification
    model = model_class.from_config(config, dtype=torch.float32)
    state = {name: torch.zeros_like(value) for name, value in model.state_dict().items()}
    _copy_layers(state, base.state_dict(), kept=kept, scale=math.sqrt(hidden / wide))
    constant_dim = wide - 1
    if readout.normed:
        final_norm = base.state_dict()["norm.weight"] * math.sqrt(hidden / wide)
        _write_logit_layer(state, f"model.layers.{kept}.", readout.weight, final_norm, dim=hidden)
        weight = torch.zeros(wide)
        weight[hidden] = 1.0
    else:
        weight = torch.cat([readout.weight, torch.zeros(wide - hidden)])
    state[f"model.layers.{kept + extra - 1}.self_attn.o_proj.bias"][constant_dim] = CONSTANT
    state["model.norm.weight"].fill_(1.0)
    # The final norm divides by ~CONSTANT/sqrt(wide): the row undoes that, the constant carries b.
    row = weight * CONSTANT / math.sqrt(wide)
    row[constant_dim] = readout.bias / math.sqrt(wide)
    if as_kind == "step_token":
        state["lm_head.weight"][good_token_id] = row  # every other row 0, the bad token's included
    else:
        state["score.weight"][1] = row
    model.load_state_dict(state)
    return model.eval()


def _widened_config(old, *, layers: int, extra: int, mlp_bias: bool):
    hidden = old.hidden_size
    # transformers wants the width a multiple of the head count; the padding stays zero.
    wide = -(-(hidden + extra) // old.num_attention_heads) * old.num_attention_heads
    return LlamaConfig.from_dict(old.to_dict() | {
        "hidden_size": wide, "head_dim": old.head_dim, "num_hidden_layers": layers,
        "attention_bias": True, "mlp_bias": mlp_bias or old.mlp_bias, "tie_word_embeddings": False,
        # The mean over `wide` dims of a vector zero outside the first `hidden`: eps and the norm
        # weights scaled by hidden/wide keep every original norm's output unchanged.
        "rms_norm_eps": old.rms_norm_eps * hidden / wide, "num_labels": 2, "layer_types": None,
    })


def _copy_layers(state: dict, original: dict, *, kept: int, scale: float) -> None:
    """The embeddings and the first `kept` layers into the wider (zero-padded) tensors."""
    for name, value in original.items():
        index = _layer_index(name)
        if index is not None and index >= kept or name == "norm.weight":
            continue
        factor = scale if name.endswith("layernorm.weight") else 1.0
        state[f"model.{name}"][tuple(slice(0, n) for n in value.shape)] = value * factor


def _write_logit_layer(state: dict, prefix: str, weight: torch.Tensor, norm_weight: torch.Tensor, *, dim: int):
    """A layer with no attention whose MLP writes z = weight·final_norm(h) into `dim`: its
    post-attention norm is the final norm, and silu(z)·1 - silu(-z)·1 = z exactly."""
    hidden = weight.shape[0]
    state[prefix + "post_attention_layernorm.weight"][:hidden] = norm_weight
    state[prefix + "mlp.gate_proj.weight"][0, :hidden] = weight
    state[prefix + "mlp.gate_proj.weight"][1, :hidden] = -weight
    state[prefix + "mlp.up_proj.bias"][:2] = 1.0
    state[prefix + "mlp.down_proj.weight"][dim, 0] = 1.0
    state[prefix + "mlp.down_proj.weight"][dim, 1] = -1.0


def _layer_index(name: str) -> int | None:
    parts = name.split(".")
    return int(parts[1]) if parts[0] == "layers" else None

