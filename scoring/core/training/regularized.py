"""A step head fitted to convergence: L2-regularized logistic regression on frozen features.

The SGD loop (`loop._train_head_only`) stops after a fixed number of epochs, which under-fits
at a few hundred labels and over-fits later. A linear head is a convex problem, so here it
is solved to convergence (L-BFGS on standardized features) and the one knob, the L2
strength, is chosen on the labeled set itself by cross-validation *by problem* (steps of one
problem never sit on both sides). `TrainConfig(fit="converged")` selects it in production.

Labels are K positive of N per step with a weight per step (selection-bias importance
weights): the loss is the weighted binomial log loss, averaged, plus lam/2 * |w|^2.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from scoring.core.training.losses import StepTensors, inverse_softplus
from scoring.core.training_data import problem_hash

if TYPE_CHECKING:
    from scoring.core.prm import StepHead

LAMBDAS = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0)  # per-step mean loss; 128 standardized directions
RANK = 128  # principal directions the head may use (of 576 on SmolLM2-135M)
FOLDS = 3


@dataclass
class Standardizer:
    """z = ((h - center) / scale) @ basis: a well-conditioned problem, folded back into raw weights.

    `basis` ([D, r], orthonormal columns) restricts the head to the top principal directions
    of a set of features (`principal_basis`); None keeps all D.
    """

    center: torch.Tensor
    scale: torch.Tensor
    basis: torch.Tensor | None = None

    @classmethod
    def of(cls, x: torch.Tensor) -> Standardizer:
        x = x.double()
        scale = x.std(0).clamp_min(1e-4) if len(x) > 1 else torch.ones(x.shape[1], dtype=torch.float64)
        return cls(x.mean(0), scale)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        z = (x.double() - self.center) / self.scale
        return z if self.basis is None else z @ self.basis

    def raw(self, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(w, b) on z -> the same function on raw h."""
        w_full = w if self.basis is None else self.basis @ w
        w_raw = w_full / self.scale
        return w_raw, b - w_raw @ self.center


def principal_standardizer(x: torch.Tensor, rank: int = RANK) -> Standardizer:
    """Standardize on `x` and keep its top `rank` principal directions. No labels are needed,
    so `x` may be the whole unlabeled pool's features, a better estimate than the labeled few."""
    standardizer = Standardizer.of(x)
    z = standardizer(x)
    _, _, v = torch.linalg.svd(z - z.mean(0), full_matrices=False)
    standardizer.basis = v[: min(rank, v.shape[0])].T.contiguous()
    return standardizer


@dataclass
class Fit:
    """Weights on standardized features; `raw()` gives the head's weights on hidden states."""

    w: torch.Tensor  # [D]
    b: torch.Tensor  # scalar
    lam: float
    standardizer: Standardizer
    cv_loss: dict[float, float] | None = None

    def raw(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.standardizer.raw(self.w, self.b)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.raw()
        return x.double() @ w + b


def weighted_log_loss(z: torch.Tensor, t: StepTensors) -> torch.Tensor:
    """Binomial NLL of K of N under sigmoid(z), positives and negatives weighted, per unit weight."""
    k, n = t.k.double(), t.n.double()
    pos, neg = t.pos_weight.double(), t.neg_weight.double()
    nll = pos * k * F.softplus(-z) + neg * (n - k) * F.softplus(z)
    return nll.sum() / (pos * k + neg * (n - k)).sum().clamp_min(1e-12)


def take(t: StepTensors, rows: torch.Tensor) -> StepTensors:
    return StepTensors(k=t.k[rows], n=t.n[rows], pos_weight=t.pos_weight[rows], neg_weight=t.neg_weight[rows])


def solve(z: torch.Tensor, t: StepTensors, *, lam: float, start: tuple[torch.Tensor, torch.Tensor] | None = None,
          max_iter: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    """argmin of the weighted log loss + lam/2 |w|^2 on `z` (bias unpenalized), by damped Newton.

    The problem is strictly convex for lam > 0; on r <= 128 columns a Newton step is one small
    solve, so the optimum is reached in a few iterations (|step| < 1e-8), not approximated.
    """
    z = torch.cat([z.double(), torch.ones(len(z), 1, dtype=torch.float64)], 1)
    k, n = t.k.double(), t.n.double()
    pos, neg = t.pos_weight.double(), t.neg_weight.double()
    total = (pos * k + neg * (n - k)).sum().clamp_min(1e-12)
    penalty = torch.full((z.shape[1],), lam, dtype=torch.float64)
    penalty[-1] = 0.0
    if start is None:
        rate = float((k.sum() / n.sum().clamp_min(1e-12)).clamp(0.02, 0.98))
        theta = torch.zeros(z.shape[1], dtype=torch.float64)
        theta[-1] = math.log(rate / (1 - rate))
    else:
        theta = torch.cat([start[0].double().reshape(-1), start[1].double().reshape(1)])

    def objective(th: torch.Tensor) -> float:
        s = z @ th
        nll = pos * k * F.softplus(-s) + neg * (n - k) * F.softplus(s)
        return float(nll.sum() / total + 0.5 * (penalty * th * th).sum())

    current = objective(theta)
    for _ in range(max_iter):
        p = torch.sigmoid(z @ theta)
        # d/ds of the per-row loss, and its curvature (weighted binomial)
        grad_s = (neg * (n - k) * p - pos * k * (1 - p)) / total
        curv = (neg * (n - k) + pos * k) * p * (1 - p) / total
        grad = z.T @ grad_s + penalty * theta
        hessian = (z * curv[:, None]).T @ z + torch.diag(penalty) + 1e-10 * torch.eye(z.shape[1], dtype=torch.float64)
        step = torch.linalg.solve(hessian, grad)
        size = 1.0
        while size > 1e-4:
            candidate = theta - size * step
            value = objective(candidate)
            if value <= current + 1e-12:
                break
            size /= 2
        theta, current = candidate, value
        if float((size * step).abs().max()) < 1e-8:
            break
    return theta[:-1].clone(), theta[-1].clone()


def folds(groups: Sequence[int], n_folds: int = FOLDS, seed: int = 0) -> torch.Tensor:
    """Fold index per row, by problem: a stable hash, so a problem stays in its fold."""
    return torch.tensor([int(problem_hash(g, seed + 7919) * n_folds) for g in groups])


def choose_lambda(z: torch.Tensor, t: StepTensors, groups: Sequence[int], *, lambdas: Sequence[float] = LAMBDAS,
                  seed: int = 0) -> tuple[float, dict[float, float]]:
    """The L2 strength with the lowest cross-validated log loss (folds by problem)."""
    fold = folds(groups, seed=seed)
    present = sorted(set(fold.tolist()))
    if len(present) < 2:
        return lambdas[len(lambdas) // 2], {}
    losses: dict[float, float] = {}
    starts: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for lam in sorted(lambdas, reverse=True):  # strong to weak: each warm-starts the next
        total = 0.0
        for f in present:
            train, test = fold != f, fold == f
            starts[f] = solve(z[train], take(t, train), lam=lam, start=starts.get(f))
            w, b = starts[f]
            total += float(weighted_log_loss(z[test].double() @ w + b, take(t, test))) * int(test.sum())
        losses[lam] = total / len(fold)
    return min(losses, key=losses.__getitem__), losses


def fit_converged(x: torch.Tensor, t: StepTensors, groups: Sequence[int], *, lam: float | None = None,
                  seed: int = 0, standardizer: Standardizer | None = None) -> Fit:
    """Standardize and project (default: `principal_standardizer(x)`), choose lam by problem-wise
    CV (unless given), solve on all rows."""
    standardizer = standardizer or principal_standardizer(x)
    z = standardizer(x)
    cv = None
    if lam is None:
        lam, cv = choose_lambda(z, t, groups, seed=seed)
    w, b = solve(z, t, lam=lam)
    return Fit(w, b, lam, standardizer, cv)


def into_head(head: StepHead, fit: Fit, *, kappa: float) -> None:
    """Write a fit into a StepHead (raw hidden states in); a beta head gets a constant kappa."""
    w, b = fit.raw()
    with torch.no_grad():
        head.mu.weight.copy_(w.float().reshape(1, -1))
        head.mu.bias.copy_(b.float().reshape(1))
        if head.kappa is not None:
            head.kappa.weight.zero_()
            head.kappa.bias.fill_(inverse_softplus(kappa))
