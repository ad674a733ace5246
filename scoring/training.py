"""Fine-tune a PRM on collected step labels: point (BCE) and BetaPRM heads.

Plain PyTorch/transformers with dataclass configs (no Django): the Django side
(`scoring/retraining.py`) turns labels into `LabeledRow`s and stores what `train()` returns.

Labels follow PRM800K: every step up to and including an annotator's first -1 is
supervised, later steps carry no label; a neutral (0) counts as positive by default
("Let's Verify Step by Step" found that best). Several annotators (or rollouts) of one
step give K positive out of N; the point head fits a binomial (BCE for N = 1), the beta head
a beta-binomial with a learned concentration kappa ("Process Rewards with Learned
Reliability"), so sigma = sqrt(mu(1-mu)/(kappa+1)) says how reliable mu is.

With a frozen backbone (the CPU default) the hidden states at the separator positions
are computed once per (solution, backbone, layer) and cached on disk, so retraining the
head is seconds of linear algebra.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from scoring import prm
from scoring.training_data import Example, LabeledRow, TrainConfig, build_examples, class_weights, split_by_problem

KAPPA_EPS = 1e-4  # the same epsilon as prm.StepHead

Progress = Callable[[int, int, str, dict | None], None]


@dataclass
class StepTensors:
    """The labeled steps of a set of examples, flattened: one row per step with N > 0."""

    k: torch.Tensor
    n: torch.Tensor
    pos_weight: torch.Tensor
    neg_weight: torch.Tensor

    @property
    def weight(self) -> torch.Tensor:
        """One weight per step for losses that cannot split K and N-K (beta-binomial)."""
        return (self.pos_weight * self.k + self.neg_weight * (self.n - self.k)) / self.n


def step_tensors(examples: Sequence[Example], config: TrainConfig) -> StepTensors:
    """Flatten the labeled steps, with the selection-bias weights the config asks for.

    importance: each step carries its solution's weight. class: one weight for positives
    and one for negatives, moving the base rate to `target_base_rate` or, when unset, to
    the importance-weighted rate (the pool's rate as the labels estimate it).
    """
    k, n, w = [], [], []
    for e in examples:
        for kk, nn_ in zip(e.k, e.n):
            if nn_ > 0:
                k.append(kk)
                n.append(nn_)
                w.append(e.row.weight)
    kt, nt, wt = (torch.tensor(v, dtype=torch.float32) for v in (k, n, w))
    if config.bias_correction == "importance":
        return StepTensors(k=kt, n=nt, pos_weight=wt, neg_weight=wt.clone())
    ones = torch.ones_like(kt)
    if config.bias_correction == "class" and len(k):
        estimated = float((wt * kt).sum() / (wt * nt).sum())
        target = config.target_base_rate if config.target_base_rate is not None else estimated
        w_pos, w_neg = class_weights(float(kt.sum()), float(nt.sum()), target)
        return StepTensors(k=kt, n=nt, pos_weight=ones * w_pos, neg_weight=ones * w_neg)
    return StepTensors(k=kt, n=nt, pos_weight=ones, neg_weight=ones.clone())


# --- losses ---------------------------------------------------------------------------------


def point_loss(mu_logit: torch.Tensor, k: torch.Tensor, n: torch.Tensor,
               pos_weight: torch.Tensor | None = None, neg_weight: torch.Tensor | None = None) -> torch.Tensor:
    """Binomial NLL of K of N with p = sigmoid(logit), per label: plain BCE when N = 1."""
    pos_weight = torch.ones_like(k) if pos_weight is None else pos_weight
    neg_weight = torch.ones_like(k) if neg_weight is None else neg_weight
    nll = pos_weight * k * F.softplus(-mu_logit) + neg_weight * (n - k) * F.softplus(mu_logit)
    return nll.sum() / (pos_weight * k + neg_weight * (n - k)).sum()


def beta_binomial_nll(k: torch.Tensor, n: torch.Tensor, mu: torch.Tensor, kappa: torch.Tensor) -> torch.Tensor:
    """-log BetaBinomial(K | N, alpha = mu*kappa, beta = (1-mu)*kappa), per step."""
    alpha, beta = mu * kappa, (1 - mu) * kappa
    log_choose = torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)
    log_beta_ratio = (
        torch.lgamma(k + alpha) + torch.lgamma(n - k + beta) - torch.lgamma(n + alpha + beta)
        + torch.lgamma(alpha + beta) - torch.lgamma(alpha) - torch.lgamma(beta)
    )
    return -(log_choose + log_beta_ratio)


def beta_loss(mu_logit: torch.Tensor, kappa: torch.Tensor, k: torch.Tensor, n: torch.Tensor,
              weight: torch.Tensor | None = None, lam: float = 0.05) -> torch.Tensor:
    """BetaPRM: weighted mean beta-binomial NLL + lam * mean(|stopgrad(mu) - K/N| * kappa).

    The second term makes confidence (kappa) expensive exactly where the mean is off,
    so kappa learns how reliable mu is instead of growing without bound.
    """
    mu = torch.sigmoid(mu_logit).clamp(1e-6, 1 - 1e-6)
    weight = torch.ones_like(k) if weight is None else weight
    nll = (weight * beta_binomial_nll(k, n, mu, kappa)).sum() / weight.sum()
    reliability = ((mu.detach() - k / n).abs() * kappa).mean()
    return nll + lam * reliability


def head_loss(head: prm.StepHead, h: torch.Tensor, t: StepTensors, lam: float) -> torch.Tensor:
    mu_logit, kappa = head(h)
    if kappa is None:
        return point_loss(mu_logit, t.k, t.n, t.pos_weight, t.neg_weight)
    return beta_loss(mu_logit, kappa, t.k, t.n, t.weight, lam)


def new_head(hidden_size: int, config: TrainConfig, base_rate: float) -> prm.StepHead:
    """A head starting at the data's base rate and, for beta, at kappa = kappa_init."""
    head = prm.StepHead(hidden_size, config.head)
    with torch.no_grad():
        # Zero weights: a linear head's loss is convex, so no symmetry needs breaking, and
        # hidden-state scales (outlier dimensions) cannot blow up the first logits.
        head.mu.weight.zero_()
        head.mu.bias.fill_(math.log(base_rate / (1 - base_rate)))
        if head.kappa is not None:
            head.kappa.weight.zero_()
            head.kappa.bias.fill_(inverse_softplus(config.kappa_init - KAPPA_EPS))
    return head


def inverse_softplus(y: float) -> float:
    return y + math.log(-math.expm1(-y))


def head_optimizer(head: prm.StepHead, config: TrainConfig, extra: Sequence[nn.Parameter] = ()) -> torch.optim.Optimizer:
    """AdamW; the kappa head learns 10x faster (as in the BetaPRM code), the backbone slower."""
    groups = [{"params": list(head.mu.parameters()), "lr": config.lr}]
    if head.kappa is not None:
        groups.append({"params": list(head.kappa.parameters()), "lr": config.lr * config.kappa_lr_multiplier})
    if extra:
        groups.append({"params": list(extra), "lr": config.backbone_lr})
    return torch.optim.AdamW(groups, weight_decay=config.weight_decay)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# --- backbone and feature cache -----------------------------------------------------------


def load_backbone(folder: str | Path, *, separator: str = prm.DEFAULT_SEPARATOR, device: str | torch.device | None = None,
                  dtype: torch.dtype | None = None) -> prm.LoadedPRM:
    """A bare backbone (no head) wrapped as a LoadedPRM, to extract step features or train."""
    from transformers import AutoModel, AutoTokenizer

    folder = Path(folder).resolve()
    prm.check_safetensors_only(folder)
    device = torch.device(device) if device is not None else prm.choose_device()
    dtype = dtype or prm.choose_dtype(device)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder, dtype=dtype, use_safetensors=True).to(device).eval()
    config = {"kind": "head", "backbone": ".", "separator": separator,
              "head": {"type": "point", "layer": None, "hidden_size": model.config.hidden_size}}
    return prm.LoadedPRM(kind="head", config=config, model=model, tokenizer=tokenizer, device=device, dtype=dtype)


def default_layer(num_layers: int) -> int:
    """~60 % depth: on frozen SmolLM2 layer 18 of 30 gave step AUC 0.69 vs 0.63 at the last."""
    return max(1, round(0.6 * num_layers))


def decoder_layers_owner(model: nn.Module) -> nn.Module | None:
    """The module holding the decoder's `layers` list (through peft wrappers too)."""
    for module in model.modules():
        if isinstance(getattr(module, "layers", None), nn.ModuleList):
            return module
    return None


@contextlib.contextmanager
def truncated(model: nn.Module, layer: int | None) -> Iterator[int | None]:
    """Run only the first `layer` decoder layers (their output is hidden_states[layer]).

    Layers above the read-out cannot change it, so skipping them is free speed (1.65x on
    SmolLM2 at layer 18). Yields the hidden_states index to read: None = last_hidden_state.
    """
    owner = decoder_layers_owner(model)
    layers = owner.layers if owner is not None else None
    if layer is None or layers is None or layer >= len(layers) or not hasattr(owner, "norm"):
        yield layer
        return
    norm = owner.norm
    owner.layers, owner.norm = nn.ModuleList(layers[:layer]), nn.Identity()
    try:
        yield None
    finally:
        owner.layers, owner.norm = layers, norm


def backbone_fingerprint(folder: str | Path) -> str:
    """Identity of a backbone's weights: sha256 over its config and safetensors bytes."""
    folder = Path(folder).resolve()
    stamp = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.glob("*.safetensors"))]
    return _fingerprint(str(folder), json.dumps(stamp))


_FINGERPRINTS: dict[tuple[str, str], str] = {}


def _fingerprint(folder: str, stamp: str) -> str:
    # Hashing 270 MB takes a second; remember it while the files are unchanged.
    key = (folder, stamp)
    if key not in _FINGERPRINTS:
        digest = hashlib.sha256()
        for name in ["config.json", *sorted(p.name for p in Path(folder).glob("*.safetensors"))]:
            path = Path(folder) / name
            if path.exists():
                digest.update(name.encode() + b"\0")
                with path.open("rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(block)
        _FINGERPRINTS[key] = digest.hexdigest()
    return _FINGERPRINTS[key]


class FeatureCache:
    """Hidden states at separator positions, one safetensors file per (solution, backbone, layer).

    The key hashes the solution's text and the separator, so an edited solution is
    recomputed and an unchanged one never is.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.hits = 0
        self.misses = 0
        self.computed_tokens = 0  # tokens run through the backbone to fill the cache

    def path(self, backbone_id: str, layer: int | None, dtype: torch.dtype, separator: str, problem: str,
             steps: Sequence[str]) -> Path:
        key = hashlib.sha256(json.dumps([separator, problem, list(steps)]).encode()).hexdigest()
        # bf16 and fp32 forwards give (slightly) different states: the dtype is part of the key.
        where = f"{backbone_id[:16]}-{str(dtype).removeprefix('torch.')}"
        return self.root / where / f"L{'last' if layer is None else layer}" / key[:2] / f"{key}.safetensors"

    def features(self, loaded: prm.LoadedPRM, items: Sequence[prm.Item], *, layer: int | None,
                 backbone_id: str, progress: Callable[[int, int], None] | None = None, chunk: int = 8) -> list[torch.Tensor]:
        """Features for every item, computing (in chunks) and storing only the missing ones."""
        from safetensors.torch import load_file, save_file

        paths = [self.path(backbone_id, layer, loaded.dtype, loaded.separator, p, s) for p, s in items]
        out: list[torch.Tensor | None] = [None] * len(items)
        missing = []
        for i, path in enumerate(paths):
            if path.exists():
                out[i] = load_file(str(path))["h"]
                self.hits += 1
            else:
                missing.append(i)
        for start in range(0, len(missing), chunk):
            batch = missing[start : start + chunk]
            with truncated(loaded.model, layer) as read_at:
                computed = loaded.step_features([items[i] for i in batch], layer=read_at)
            for i, h in zip(batch, computed):
                paths[i].parent.mkdir(parents=True, exist_ok=True)
                tmp = paths[i].with_suffix(f".{os.getpid()}.tmp")
                save_file({"h": h.contiguous()}, str(tmp))
                os.replace(tmp, paths[i])  # atomic: a concurrent reader never sees half a file
                out[i] = h
                self.misses += 1
                self.computed_tokens += len(loaded.encode(*items[i]).ids)
            if progress:
                progress(min(start + chunk, len(missing)), len(missing))
        return [h for h in out if h is not None]


# --- training -------------------------------------------------------------------------------


@dataclass
class TrainResult:
    head: prm.StepHead
    layer: int | None
    config: TrainConfig
    train_examples: list[Example]
    val_examples: list[Example]
    loss_curve: list[dict] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    backbone: nn.Module | None = None  # set when the backbone was trained (not head mode)
    tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    def data_snapshot(self) -> dict:
        def describe(examples: Sequence[Example]) -> dict:
            k = sum(sum(e.k) for e in examples)
            n = sum(sum(e.n) for e in examples)
            return {"solutions": len(examples), "problems": len({e.row.problem_id for e in examples}),
                    "labeled_steps": sum(e.labeled_steps for e in examples), "labels": n,
                    "positive_rate": k / n if n else None}

        ids = sorted(e.row.solution_id for e in self.train_examples)
        return {"train": describe(self.train_examples), "val": describe(self.val_examples),
                "train_solution_ids_sha256": hashlib.sha256(json.dumps(ids).encode()).hexdigest(),
                "val_problem_ids": sorted({e.row.problem_id for e in self.val_examples})}


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
    """Train a step head (and, outside head mode, part of the backbone) on labeled rows."""
    config.validate()
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
    head = init_head if init_head is not None else new_head(backbone.model.config.hidden_size, config, min(max(base, 0.02), 0.98))
    result = TrainResult(head=head, layer=layer, config=config, train_examples=train_set, val_examples=val_set)
    notify = progress or (lambda *args: None)
    started = time.perf_counter()
    if config.mode == "head":
        _train_head_only(result, backbone, cache or FeatureCache(Path(".") / "feature-cache"), backbone_id, train_t, val_t, notify)
    else:
        _train_backbone(result, backbone, train_t, val_t, notify)
    result.seconds = time.perf_counter() - started
    return result


def _train_head_only(result: TrainResult, backbone: prm.LoadedPRM, cache: FeatureCache, backbone_id: str,
                     train_t: StepTensors, val_t: StepTensors, notify: Progress) -> None:
    config, layer = result.config, result.layer

    def features(examples: Sequence[Example], what: str) -> torch.Tensor:
        items = [(e.row.problem, list(e.row.steps)) for e in examples]
        hs = cache.features(backbone, items, layer=layer, backbone_id=backbone_id,
                            progress=lambda done, total: notify(0, config.epochs, f"{what} features {done}/{total}", None))
        rows = [h[[i for i, n in enumerate(e.n) if n > 0]] for h, e in zip(hs, examples)]
        return torch.cat(rows) if rows else torch.empty(0, backbone.model.config.hidden_size)

    computed_before = cache.computed_tokens
    x_train = features(result.train_examples, "train")
    x_val = features(result.val_examples, "validation")
    result.tokens = cache.computed_tokens - computed_before
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
        point = {"epoch": epoch + 1, "train_loss": total / max(len(x_train), 1), "val_loss": val_loss}
        result.loss_curve.append(point)
        monitored = val_loss if val_loss is not None else point["train_loss"]
        if monitored < best[0]:
            best = (monitored, _copy_state(head))
        notify(epoch + 1, config.epochs, f"epoch {epoch + 1}: train {point['train_loss']:.4f} val {_fmt(val_loss)}", point)
    head.load_state_dict(best[1])
    _scale_head(head, center, scale, inverse=False)
    head.eval()
    result.metrics = {"best_loss": best[0], "train_steps": len(x_train), "val_steps": len(x_val)}


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


def _copy_state(module: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


@torch.no_grad()
def _evaluate_loss(head: prm.StepHead, x: torch.Tensor, t: StepTensors, lam: float) -> float | None:
    if len(x) == 0:
        return None
    head.eval()
    return float(head_loss(head, x, t, lam))


def _train_backbone(result: TrainResult, backbone: prm.LoadedPRM, train_t: StepTensors, val_t: StepTensors,
                    notify: Progress) -> None:
    """Top-k layers, LoRA or full fine-tuning: forward passes with gradients."""
    config = result.config
    model = _prepare_backbone(backbone.model, config, result.layer)
    head = result.head.to(backbone.device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = head_optimizer(head, config, params)
    encoded = {id(e): backbone.encode(e.row.problem, list(e.row.steps)) for e in result.train_examples + result.val_examples}
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
        model = model.merge_and_unload()
    if config.gradient_checkpointing:
        _checkpointing(model, enable=False)
    result.backbone = model
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
        upto = layer if layer is not None and layer < len(layers) else len(layers)
        for block in layers[max(0, upto - config.topk) : upto]:
            for p in block.parameters():
                p.requires_grad_(True)
    if config.mode == "lora":
        from peft import LoraConfig, get_peft_model

        targets = [n for n in ("q_proj", "k_proj", "v_proj", "o_proj") if any(n in name for name, _ in model.named_modules())]
        model = get_peft_model(model, LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0,
                                                 target_modules=targets or "all-linear"))
    if config.gradient_checkpointing:
        _checkpointing(model, enable=True)
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    return model


def _checkpointing(model: nn.Module, *, enable: bool) -> None:
    """Recompute activations in the backward pass: less memory for ~30 % more compute."""
    verb = "enable" if enable else "disable"
    # transformers 5 renamed gradient_* to activation_checkpointing_*; accept either.
    method = getattr(model, f"activation_checkpointing_{verb}", None) or getattr(model, f"gradient_checkpointing_{verb}", None)
    if method is not None:
        method()


def _hidden_at_labels(backbone: prm.LoadedPRM, model: nn.Module, batch: Sequence[Example], encoded: dict,
                      layer: int | None) -> torch.Tensor:
    """Hidden states [labeled steps, H] at the separators of a batch, with gradients."""
    device = backbone.device
    width = max(len(encoded[id(e)].ids) for e in batch)
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, e in enumerate(batch):
        n = len(encoded[id(e)].ids)
        ids[row, :n] = torch.tensor(encoded[id(e)].ids)
        mask[row, :n] = 1
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    with truncated(model, layer) as read_at, autocast:
        out = model(input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=read_at is not None)
        states = out.hidden_states[read_at] if read_at is not None else out.last_hidden_state
    rows = []
    for row, e in enumerate(batch):
        positions = [p for p, n in zip(encoded[id(e)].positions, e.n) if n > 0]
        rows.append(states[row, positions])
    return torch.cat(rows)


def _tensors_to(t: StepTensors, device: torch.device) -> StepTensors:
    return StepTensors(k=t.k.to(device), n=t.n.to(device), pos_weight=t.pos_weight.to(device),
                       neg_weight=t.neg_weight.to(device))


@torch.no_grad()
def _backbone_val_loss(backbone: prm.LoadedPRM, model: nn.Module, head: prm.StepHead, result: TrainResult,
                       encoded: dict, val_t: StepTensors) -> float | None:
    if not result.val_examples:
        return None
    model.eval()
    head.eval()
    hs = [_hidden_at_labels(backbone, model, [e], encoded, result.layer) for e in result.val_examples]
    return float(head_loss(head, torch.cat(hs).float(), _tensors_to(val_t, backbone.device), result.config.lam))


# --- checkpoints ----------------------------------------------------------------------------


def save_checkpoint(result: TrainResult, folder: str | Path, *, parent_backbone: str | Path, tokenizer,
                    separator: str = prm.DEFAULT_SEPARATOR, extra_meta: dict | None = None) -> Path:
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
    return prm.save_head_model(folder, head=result.head, backbone=backbone, layer=result.layer,
                               separator=separator, meta=meta)


def step_probabilities(loaded: prm.LoadedPRM, items: Sequence[prm.Item], *, cache: FeatureCache | None = None,
                       backbone_id: str = "") -> list[list[prm.StepProbability]]:
    """Step probabilities of a loaded model; head models reuse cached features when they can."""
    if loaded.kind != "head" or cache is None or not backbone_id:
        return loaded.step_probabilities(items)
    assert loaded.head is not None
    layer = loaded.config["head"].get("layer")
    features = cache.features(loaded, items, layer=layer, backbone_id=backbone_id)
    return [loaded.head.probabilities(h) for h in features]
