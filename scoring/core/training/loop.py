"""The training loops: a head on cached frozen-backbone features, or gradients through the
backbone (top-k layers, LoRA, full). Plain PyTorch/transformers, no Django: the Django side
(`scoring/learning/retraining.py`) hands over `LabeledRow`s and stores what `train()` returns.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn

from scoring.core import model_loading, prm
from scoring.core.encoding import Encoded
from scoring.core.training import regularized
from scoring.core.training.features import FeatureCache, decoder_layers_owner, default_layer, truncated
from scoring.core.training.losses import StepTensors, head_loss, head_optimizer, new_head, step_tensors
from scoring.core.training_data import Example, LabeledRow, TrainConfig, build_examples, split_by_problem

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel

Progress = Callable[[int, int, str, dict[str, Any] | None], None]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class TrainResult:
    head: prm.StepHead
    layer: int | None
    config: TrainConfig
    train_examples: list[Example]
    val_examples: list[Example]
    loss_curve: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    backbone: PreTrainedModel | None = None  # set when the backbone was trained (not head mode)
    tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    def data_snapshot(self) -> dict[str, Any]:
        def describe(examples: Sequence[Example]) -> dict[str, Any]:
            k = sum(sum(e.k) for e in examples)
            n = sum(sum(e.n) for e in examples)
            return {
                "solutions": len(examples),
                "problems": len({e.row.problem_id for e in examples}),
                "labeled_steps": sum(e.labeled_steps for e in examples),
                "labels": n,
                "human_labels": sum(e.human_labels for e in examples),
                "automatic_labels": sum(e.automatic_labels for e in examples),
                "positive_rate": k / n if n else None,
            }

        ids = sorted(e.row.solution_id for e in self.train_examples)
        return {
            "train": describe(self.train_examples),
            "val": describe(self.val_examples),
            "train_solution_ids_sha256": hashlib.sha256(json.dumps(ids).encode()).hexdigest(),
        } | self.split()

    def split(self) -> dict[str, list[int]]:
        """The problems trained on and held out: what the gate must measure the model on (and not)."""
        return {
            "train_problem_ids": sorted({e.row.problem_id for e in self.train_examples}),
            "val_problem_ids": sorted({e.row.problem_id for e in self.val_examples}),
        }


def train(
    rows: Sequence[LabeledRow],
    *,
    backbone: prm.LoadedPRM,
    config: TrainConfig,
    cache: FeatureCache | None = None,
    backbone_id: str = "",
    init_head: prm.StepHead | None = None,
    progress: Progress | None = None,
) -> TrainResult:
    """Train a step head (and, outside head mode, part of the backbone) on labeled rows.

    Head mode reads features through `cache`, which the caller must give: where features
    are stored is a decision of the app (settings.FEATURE_CACHE_DIR), never the current folder.
    """
    config.validate()
    if config.mode == "head" and cache is None:
        raise ValueError("head-only training needs a feature cache: pass cache=FeatureCache(root)")
    if config.mode != "head" and model_loading.is_shared(backbone.model):
        # A shared backbone is what scoring reads: training it would change scores under their version's name.
        raise ValueError(f"mode {config.mode!r} changes the backbone's weights, and this one is shared: "
                         "train a copy of its own (training.load_backbone without frozen)")
    seed_everything(config.seed)
    examples = build_examples(rows, neutral=config.neutral)
    if not examples:
        raise ValueError("no labeled steps to train on")
    train_set, val_set = split_by_problem(examples, val_fraction=config.val_fraction, seed=config.seed)
    if not train_set:
        raise ValueError("every labeled problem fell into validation; label more problems or lower val_fraction")
    num_layers = backbone.model.config.num_hidden_layers
    layer = config.layer if config.layer is not None else default_layer(num_layers)
    if not 0 <= layer <= num_layers:
        raise ValueError(f"layer={layer}; the backbone has hidden states 0..{num_layers}")
    train_t, val_t = step_tensors(train_set, config), step_tensors(val_set, config)
    base = float((train_t.weight * train_t.k).sum() / (train_t.weight * train_t.n).sum())
    head = (
        init_head
        if init_head is not None
        else new_head(backbone.model.config.hidden_size, config, min(max(base, 0.02), 0.98))
    )
    result = TrainResult(head=head, layer=layer, config=config, train_examples=train_set, val_examples=val_set)
    notify = progress or (lambda *args: None)
    started = time.perf_counter()
    if config.mode == "head":
        assert cache is not None  # checked above
        _train_head_only(result, backbone, cache, backbone_id, train_t, val_t, notify)
    else:
        _train_backbone(result, backbone, train_t, val_t, notify)
    result.seconds = time.perf_counter() - started
    return result


def _train_head_only(
    result: TrainResult,
    backbone: prm.LoadedPRM,
    cache: FeatureCache,
    backbone_id: str,
    train_t: StepTensors,
    val_t: StepTensors,
    notify: Progress,
) -> None:
    config, layer = result.config, result.layer

    def features(examples: Sequence[Example], what: str) -> torch.Tensor:
        items = [(e.row.problem, list(e.row.steps)) for e in examples]
        hs = cache.features(
            backbone,
            items,
            layer=layer,
            backbone_id=backbone_id,
            progress=lambda done, total: notify(0, config.epochs, f"{what} features {done}/{total}", None),
        )
        rows = [h[[i for i, n in enumerate(e.n) if n > 0]] for h, e in zip(hs, examples)]
        return torch.cat(rows) if rows else torch.empty(0, backbone.model.config.hidden_size)

    computed_before = cache.computed_tokens
    x_train = features(result.train_examples, "train")
    x_val = features(result.val_examples, "validation")
    result.tokens = cache.computed_tokens - computed_before
    if config.fit == "converged":
        _fit_head_converged(result, x_train, x_val, train_t, val_t, notify)
        return
    # Standardize features for a well-conditioned linear fit, then fold the scaling
    # back into the head so the saved head reads raw hidden states.
    center, scale = x_train.mean(0), x_train.std(0).clamp_min(1e-4)
    head = result.head
    _scale_head(head, center, scale, inverse=True)
    optimizer = head_optimizer(head, config)
    generator = torch.Generator().manual_seed(config.seed)
    best = (math.inf, _copy_state(head))
    for epoch in range(config.epochs):
        head.train()
        order = torch.randperm(len(x_train), generator=generator)
        total = 0.0
        for start in range(0, len(order), config.batch_size):
            idx = order[start : start + config.batch_size]
            loss = head_loss(head, (x_train[idx] - center) / scale, _take(train_t, idx), config.lam)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        val_loss = _evaluate_loss(head, (x_val - center) / scale, val_t, config.lam)
        train_loss = total / max(len(x_train), 1)
        point = {"epoch": epoch + 1, "train_loss": train_loss, "val_loss": val_loss}
        result.loss_curve.append(point)
        monitored = val_loss if val_loss is not None else train_loss
        if monitored < best[0]:
            best = (monitored, _copy_state(head))
        notify(
            epoch + 1, config.epochs, f"epoch {epoch + 1}: train {point['train_loss']:.4f} val {_fmt(val_loss)}", point
        )
    head.load_state_dict(best[1])
    _scale_head(head, center, scale, inverse=False)
    head.eval()
    result.metrics = {"best_loss": best[0], "train_steps": len(x_train), "val_steps": len(x_val)}


def _fit_head_converged(result: TrainResult, x_train: torch.Tensor, x_val: torch.Tensor, train_t: StepTensors,
                        val_t: StepTensors, notify: Progress) -> None:
    """L2 logistic mu solved to convergence, L2 by CV by problem (regularized.py); kappa constant."""
    config, head = result.config, result.head
    groups = [e.row.problem_id for e in result.train_examples for n in e.n if n > 0]
    fit = regularized.fit_converged(x_train, train_t, groups, seed=config.seed)
    regularized.into_head(head, fit, kappa=config.kappa_init)
    head.eval()
    val_loss = _evaluate_loss(head, x_val, val_t, config.lam)
    result.loss_curve.append({"epoch": 1, "val_loss": val_loss, "lambda": fit.lam})
    result.metrics = {"best_loss": val_loss, "train_steps": len(x_train), "val_steps": len(x_val), "lambda": fit.lam,
                      "cv_loss": {str(k): v for k, v in (fit.cv_loss or {}).items()}}
    notify(1, 1, f"converged fit: L2 {fit.lam:g}, val {_fmt(val_loss)}", result.loss_curve[-1])


def _fmt(loss: float | None) -> str:
    return "-" if loss is None else f"{loss:.4f}"


def _scale_head(head: prm.StepHead, center: torch.Tensor, scale: torch.Tensor, *, inverse: bool) -> None:
    """Convert a head between raw features h and standardized z = (h - center) / scale.

    w.z + b = (w/scale).h + (b - (w/scale).center), so the two are the same function.
    """
    with torch.no_grad():
        for linear in (head.mu, head.kappa):
            if linear is None:
                continue
            if inverse:  # raw -> standardized
                linear.bias.add_(linear.weight @ center)
                linear.weight.mul_(scale)
            else:
                linear.weight.div_(scale)
                linear.bias.sub_(linear.weight @ center)


def _take(t: StepTensors, idx: torch.Tensor) -> StepTensors:
    return StepTensors(k=t.k[idx], n=t.n[idx], pos_weight=t.pos_weight[idx], neg_weight=t.neg_weight[idx])


def _copy_state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


@torch.no_grad()
def _evaluate_loss(head: prm.StepHead, x: torch.Tensor, t: StepTensors, lam: float) -> float | None:
    if len(x) == 0:
        return None
    head.eval()
    return float(head_loss(head, x, t, lam))


def _train_backbone(
    result: TrainResult, backbone: prm.LoadedPRM, train_t: StepTensors, val_t: StepTensors, notify: Progress
) -> None:
    """Top-k layers, LoRA or full fine-tuning: forward passes with gradients."""
    config = result.config
    model = _prepare_backbone(backbone.model, config, result.layer)
    head = result.head.to(backbone.device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = head_optimizer(head, config, params)
    encoded = {
        id(e): backbone.encode(e.row.problem, list(e.row.steps)) for e in result.train_examples + result.val_examples
    }
    generator = torch.Generator().manual_seed(config.seed)
    steps_per_epoch = math.ceil(len(result.train_examples) / config.batch_size)
    total_batches = config.epochs * steps_per_epoch
    done = 0
    for epoch in range(config.epochs):
        order = torch.randperm(len(result.train_examples), generator=generator).tolist()
        model.train()
        head.train()
        epoch_loss, seen = 0.0, 0
        for start in range(0, len(order), config.batch_size):
            batch = [result.train_examples[i] for i in order[start : start + config.batch_size]]
            h = _hidden_at_labels(backbone, model, batch, encoded, result.layer)
            loss = head_loss(head, h.float(), _tensors_to(step_tensors(batch, config), backbone.device), config.lam)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params + list(head.parameters()), 1.0)
            optimizer.step()
            result.tokens += sum(len(encoded[id(e)].ids) for e in batch)
            epoch_loss += loss.item() * len(batch)
            seen += len(batch)
            done += 1
            notify(done, total_batches, f"epoch {epoch + 1} batch {done}: loss {loss.item():.4f}", None)
        val_loss = _backbone_val_loss(backbone, model, head, result, encoded, val_t)
        point = {"epoch": epoch + 1, "train_loss": epoch_loss / max(seen, 1), "val_loss": val_loss}
        result.loss_curve.append(point)
        notify(done, total_batches, f"epoch {epoch + 1}: train {point['train_loss']:.4f} val {_fmt(val_loss)}", point)
    model.eval()
    head.eval()
    if config.mode == "lora":
        model = cast("PeftModel", model).merge_and_unload()  # _prepare_backbone wrapped it
    if config.gradient_checkpointing:
        _checkpointing(model, enable=False)
    result.backbone = cast("PreTrainedModel", model)  # backbone.model again (with LoRA merged back into it)
    result.head = head.cpu()
    result.metrics = {"final_loss": result.loss_curve[-1]["train_loss"], "val_loss": result.loss_curve[-1]["val_loss"]}


def _prepare_backbone(model: nn.Module, config: TrainConfig, layer: int | None) -> nn.Module:
    model.float()  # train in fp32 weights; on GPU the forward runs under bf16 autocast
    for p in model.parameters():
        p.requires_grad_(config.mode == "full")
    if config.mode == "topk":
        owner = decoder_layers_owner(model)
        if owner is None:
            raise ValueError("mode 'topk' needs a backbone with a `layers` list")
        layers = owner.layers
        assert isinstance(layers, nn.ModuleList)  # what decoder_layers_owner looks for
        upto = layer if layer is not None and layer < len(layers) else len(layers)
        for block in layers[max(0, upto - config.topk) : upto]:
            for p in block.parameters():
                p.requires_grad_(True)
    if config.mode == "lora":
        from peft import LoraConfig, get_peft_model  # peft: only a LoRA run needs it

        targets = [
            n for n in ("q_proj", "k_proj", "v_proj", "o_proj") if any(n in name for name, _ in model.named_modules())
        ]
        model = get_peft_model(
            model,
            LoraConfig(
                r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0, target_modules=targets or "all-linear"
            ),
        )
    if config.gradient_checkpointing:
        _checkpointing(model, enable=True)
        enable_input_require_grads = getattr(model, "enable_input_require_grads", None)
        if enable_input_require_grads is not None:
            enable_input_require_grads()
    return model


def _checkpointing(model: nn.Module, *, enable: bool) -> None:
    """Recompute activations in the backward pass: less memory for ~30 % more compute."""
    verb = "enable" if enable else "disable"
    # transformers 5 renamed gradient_* to activation_checkpointing_*; accept either.
    method = getattr(model, f"activation_checkpointing_{verb}", None) or getattr(
        model, f"gradient_checkpointing_{verb}", None
    )
    if method is not None:
        method()


def _hidden_at_labels(
    backbone: prm.LoadedPRM, model: nn.Module, batch: Sequence[Example], encoded: dict[int, Encoded],
    layer: int | None,
) -> torch.Tensor:
    """Hidden states [labeled steps, H] at the separators of a batch, with gradients."""
    device = backbone.device
    ids, mask = backbone.padded_batch([encoded[id(e)].ids for e in batch])
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    with truncated(model, layer) as read_at, autocast:
        out = model(input_ids=ids.to(device), attention_mask=None if mask is None else mask.to(device),
                    output_hidden_states=read_at is not None)
        states = out.hidden_states[read_at] if read_at is not None else out.last_hidden_state
    rows = []
    for row, e in enumerate(batch):
        positions = [p for p, n in zip(encoded[id(e)].positions, e.n) if n > 0]
        rows.append(states[row, positions])
    return torch.cat(rows)


def _tensors_to(t: StepTensors, device: torch.device) -> StepTensors:
    return StepTensors(
        k=t.k.to(device), n=t.n.to(device), pos_weight=t.pos_weight.to(device), neg_weight=t.neg_weight.to(device)
    )


@torch.no_grad()
def _backbone_val_loss(
    backbone: prm.LoadedPRM,
    model: nn.Module,
    head: prm.StepHead,
    result: TrainResult,
    encoded: dict[int, Encoded],
    val_t: StepTensors,
) -> float | None:
    if not result.val_examples:
        return None
    model.eval()
    head.eval()
    hs = [_hidden_at_labels(backbone, model, [e], encoded, result.layer) for e in result.val_examples]
    return float(head_loss(head, torch.cat(hs).float(), _tensors_to(val_t, backbone.device), result.config.lam))
