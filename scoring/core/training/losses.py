"""Training's losses: labeled steps as tensors, the point (binomial) and BetaPRM losses, and
the head's starting point and optimizer. Plain PyTorch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from scoring.core import prm
from scoring.core.training_data import Example, TrainConfig, class_weights

KAPPA_EPS = 1e-4  # the same epsilon as prm.StepHead


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


def point_loss(
    mu_logit: torch.Tensor,
    k: torch.Tensor,
    n: torch.Tensor,
    pos_weight: torch.Tensor | None = None,
    neg_weight: torch.Tensor | None = None,
) -> torch.Tensor:
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
        torch.lgamma(k + alpha)
        + torch.lgamma(n - k + beta)
        - torch.lgamma(n + alpha + beta)
        + torch.lgamma(alpha + beta)
        - torch.lgamma(alpha)
        - torch.lgamma(beta)
    )
    return -(log_choose + log_beta_ratio)


def beta_loss(
    mu_logit: torch.Tensor,
    kappa: torch.Tensor,
    k: torch.Tensor,
    n: torch.Tensor,
    weight: torch.Tensor | None = None,
    lam: float = 0.05,
) -> torch.Tensor:
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


def head_optimizer(
    head: prm.StepHead, config: TrainConfig, extra: Sequence[nn.Parameter] = ()
) -> torch.optim.Optimizer:
    """AdamW; the kappa head learns 10x faster (as in the BetaPRM code), the backbone slower."""
    groups = [{"params": list(head.mu.parameters()), "lr": config.lr}]
    if head.kappa is not None:
        groups.append({"params": list(head.kappa.parameters()), "lr": config.lr * config.kappa_lr_multiplier})
    if extra:
        groups.append({"params": list(extra), "lr": config.backbone_lr})
    return torch.optim.AdamW(groups, weight_decay=config.weight_decay)
