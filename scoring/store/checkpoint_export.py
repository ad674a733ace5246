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

`serve_as="vllm"` writes the token-classification read-out as `Qwen2ForProcessRewardModel`, the
process reward model vLLM serves with STEP pooling (see "The vLLM form" below); the default form is
what transformers loads.

Plain PyTorch/transformers, no Django: `scoring.store.model_exports` feeds it a version and its facts.
"""
from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForTokenClassification,
    LlamaConfig,
)

from scoring.core import model_loading, prm, step_marker
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
    serve_as: str = "transformers"  # or "vllm": Qwen2ForProcessRewardModel


def export_checkpoint(
    model_folder: str | Path, out: str | Path, *, as_kind: str = "token_classification", facts: dict | None = None,
    serve_as: str = "transformers",
) -> ExportedCheckpoint:
    """Write `out` (must not exist): safetensors, config.json, tokenizer, README.md, and for the
    transformers form stepwise.json (Stepwise loads that form back; the vLLM form it does not)."""
    if as_kind not in EXPORT_KINDS:
        raise ValueError(f"--as must be one of {EXPORT_KINDS}, not {as_kind!r}")
    _check_serve_as(serve_as, as_kind)
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
    # A copy of its own in float32 (the construction changes it), not the backbone scoring shares.
    base = model_loading.load_weights(backbone, dtype=torch.float32)
    tokenizer = model_loading.load_tokenizer(backbone)
    separator = config.get("separator", prm.DEFAULT_SEPARATOR)
    step_marker.require_step_marker(tokenizer, separator, where=str(folder))
    readout = HeadReadout.of(head, layer=config["head"].get("layer"), num_layers=base.config.num_hidden_layers)
    ids = _token_ids(tokenizer, separator, as_kind)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    stepwise_config = {"kind": as_kind, "backbone": ".", "separator": separator} | ids
    if serve_as == "vllm":
        construction = write_process_reward_model(partial, base, readout)
    else:
        model, construction = build_standard_model(base, readout, as_kind=as_kind,
                                                   good_token_id=ids.get("good_token_id"))
        model.save_pretrained(partial, safe_serialization=True)
        write_model_config(partial, stepwise_config)
    # The vLLM form's tokenizer lies apart: next to a qwen2 config.json, transformers' AutoTokenizer
    # swaps in Qwen2's own pre-tokenizer, which splits the text differently (vllm serve --tokenizer).
    tokenizer.save_pretrained(partial / VLLM_TOKENIZER if serve_as == "vllm" else partial)
    exported = ExportedCheckpoint(folder=out, kind=as_kind, config=stepwise_config, construction=construction,
                                  serve_as=serve_as)
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



# --- the vLLM form ---------------------------------------------------------------------------
#
# vLLM (read at commit 055e47c of vllm-project/vllm) serves token_classify with STEP pooling only
# from its registered process reward model, `Qwen2ForProcessRewardModel`
# (vllm/model_executor/models/qwen2_rm.py): Qwen2Model, then score = Linear(H, H) -> ReLU ->
# Linear(H, 2) on the final-normed state, softmax over the 2 labels at each step_tag_id. A causal LM
# under `--runner pooling` is converted to an embedding model (models/adapters.py: lm_head is never
# built), which refuses token_classify; so a step_token export has no vLLM form.
#
# A Llama backbone is a Qwen2 one with zero q/k/v biases. The score MLP carries the head exactly:
# its first layer's rows 0 and 1 are w and -w with biases b and -b, the second's row 1 is
# (1, -1), so the logits are [0, relu(z) - relu(-z)] = [0, z]. A head at an intermediate layer is
# linearized as above, but vLLM's Qwen2Attention takes head_dim = hidden_size / heads and has no
# o_proj bias: the residual stream is widened by one whole GQA group of query heads (and one kv
# head), and the appended layer writes the constant through that kv head's v_proj bias (attention
# weights sum to 1: the output is the bias) and o_proj.

VLLM_ARCHITECTURE = "Qwen2ForProcessRewardModel"
VLLM_TOKENIZER = "tokenizer"  # the subfolder `vllm serve --tokenizer` names
SERVE_AS = ("transformers", "vllm")


def _check_serve_as(serve_as: str, as_kind: str) -> None:
    if serve_as not in SERVE_AS:
        raise ValueError(f"--serve-as must be one of {SERVE_AS}, not {serve_as!r}")
    if serve_as == "vllm" and as_kind != "token_classification":
        raise ModelFormatError(
            "vLLM serves step rewards from Qwen2ForProcessRewardModel, a token classifier; its pooling runner "
            "drops a causal LM's lm_head, so it cannot read a step_token export: use --as token_classification"
        )


def write_process_reward_model(folder: Path, base, readout: HeadReadout) -> str:
    """config.json and model.safetensors of the Qwen2ForProcessRewardModel computing the readout."""
    from safetensors.torch import save_file

    _check_vllm_backbone(base.config)
    if readout.normed:
        config, state, construction = _qwen2_config(base.config), _qwen2_backbone(base), "plain"
        row, bias = readout.weight, readout.bias
    else:
        config, state = _widened_qwen2(base, kept=int(readout.layer or 0))
        wide = config.hidden_size
        # The final norm divides by ~CONSTANT/sqrt(wide); the row undoes that.
        row = torch.cat([readout.weight, torch.zeros(wide - readout.weight.shape[0])]) * CONSTANT / math.sqrt(wide)
        bias, construction = readout.bias, "linearized"
    state |= _score_mlp(row, bias)
    config.architectures = [VLLM_ARCHITECTURE]
    config.save_pretrained(folder)
    save_file({name: value.contiguous() for name, value in state.items()}, folder / "model.safetensors",
              metadata={"format": "pt"})
    return construction


def _check_vllm_backbone(config) -> None:
    plain_llama = config.model_type == "llama" and not config.attention_bias and not config.mlp_bias
    if not (plain_llama or config.model_type == "qwen2"):
        raise ModelFormatError(
            f"the vLLM form needs a Llama (no attention or MLP bias) or Qwen2 backbone; this one is "
            f"{config.model_type!r}"
        )
    if config.hidden_size != config.num_attention_heads * config.head_dim:
        raise ModelFormatError("vLLM's Qwen2 takes head_dim = hidden_size / num_attention_heads; this backbone differs")


def _qwen2_config(old, **changes):
    from transformers import Qwen2Config

    fields = {name: getattr(old, name) for name in (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps",
        "rope_parameters", "bos_token_id", "eos_token_id", "pad_token_id")}
    return Qwen2Config(**fields | {"tie_word_embeddings": False, "use_sliding_window": False, "num_labels": 2}
                       | changes)


def _qwen2_backbone(base) -> dict:
    """The backbone's weights under Qwen2's names (Llama's, with q/k/v biases that are zero)."""
    state = {f"model.{name}": value for name, value in base.state_dict().items()}
    for name, value in list(state.items()):
        for projection in ("q_proj", "k_proj", "v_proj"):
            if name.endswith(f"self_attn.{projection}.weight") and name.replace("weight", "bias") not in state:
                state[name.replace("weight", "bias")] = torch.zeros(value.shape[0])
    return state


def _widened_qwen2(base, *, kept: int):
    """Layers 0..kept-1 in a stream widened by one GQA group, and one layer writing CONSTANT."""
    old = base.config
    group, head_dim = old.num_attention_heads // old.num_key_value_heads, old.head_dim
    hidden, heads, kv_heads = old.hidden_size, old.num_attention_heads, old.num_key_value_heads
    wide = hidden + group * head_dim
    config = _qwen2_config(old, hidden_size=wide, num_hidden_layers=kept + 1, num_attention_heads=heads + group,
                           num_key_value_heads=kv_heads + 1, rms_norm_eps=old.rms_norm_eps * hidden / wide)
    from transformers import Qwen2Model

    shapes = {f"model.{name}": value.shape for name, value in Qwen2Model(config).state_dict().items()}
    state = {name: torch.zeros(shape) for name, shape in shapes.items()}
    for name, value in _qwen2_backbone(base).items():
        index = _layer_index(name.removeprefix("model."))
        if index is not None and index >= kept or name == "model.norm.weight":
            continue
        factor = math.sqrt(hidden / wide) if name.endswith("layernorm.weight") else 1.0
        state[name][tuple(slice(0, n) for n in value.shape)] = value * factor
    appended = f"model.layers.{kept}.self_attn."
    state[appended + "v_proj.bias"][kv_heads * head_dim] = CONSTANT  # the new kv head's first value dim
    state[appended + "o_proj.weight"][wide - 1, heads * head_dim] = 1.0  # read by the first new query head
    state["model.norm.weight"].fill_(1.0)
    return config, state


def _score_mlp(row: torch.Tensor, bias: float) -> dict:
    """score.0 / score.2 of Qwen2ForProcessRewardModel giving logits [0, row·x + bias] (see above)."""
    hidden = row.shape[0]
    first, first_bias = torch.zeros(hidden, hidden), torch.zeros(hidden)
    first[0], first[1] = row, -row
    first_bias[0], first_bias[1] = bias, -bias
    second = torch.zeros(2, hidden)
    second[1, 0], second[1, 1] = 1.0, -1.0
    return {"score.0.weight": first, "score.0.bias": first_bias, "score.2.weight": second,
            "score.2.bias": torch.zeros(2)}
