"""Epistemic uncertainty: a bootstrap ensemble of converged linear heads on frozen features.

A BetaPRM head's sigma says how noisy a step's label is (aleatoric); active learning needs
how much more labels would change the model (epistemic). Refitting the converged L2 head
(`training.regularized`) on problem-level bootstrap resamples of the labeled set gives M
heads whose disagreement is that quantity, at the cost of M small convex solves
(ActPRM, sail-sg/ActivePRM, selects by an ensemble's disagreement the same way).

Per solution, three numbers feed selection (`selection.Candidate`):
  spread                    the largest across-member std of a step's probability;
  first_error_disagreement  1 - the share of members agreeing on the predicted first error
                            (first step with p < 0.5, or none), what a label would settle;
  upper_score               an upper quantile over members of P(all steps good): a wrong
                            answer that some plausible head finds convincing.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from scoring.training import regularized
from scoring.training.losses import StepTensors

MEMBERS = 8
UPPER_QUANTILE = 0.9
THRESHOLD = 0.5  # a step below this is the predicted first error (ProcessBench's rule)


@dataclass
class Ensemble:
    """M linear heads on raw hidden states: p_m = sigmoid(h @ weights[m] + biases[m])."""

    weights: torch.Tensor  # [M, D] float64
    biases: torch.Tensor  # [M]

    def probabilities(self, h: torch.Tensor) -> torch.Tensor:
        """[M, n_steps] step probabilities for hidden states [n_steps, D]."""
        return torch.sigmoid(self.weights @ h.double().T + self.biases[:, None])

    def spread(self, h: torch.Tensor) -> list[float]:
        """Per-step std over members: what `POST /api/score` can report beside each step's score."""
        probs = self.probabilities(h)
        return probs.std(0, unbiased=False).tolist() if len(probs) > 1 else [0.0] * h.shape[0]


@dataclass(frozen=True)
class SolutionUncertainty:
    spread: float
    first_error_disagreement: float
    upper_score: float


def bootstrap_weights(groups: Sequence[int], rng: random.Random) -> torch.Tensor:
    """Per-row multiplicity of its problem in one resample of the problems (with replacement)."""
    problems = sorted(set(groups))
    counts = Counter(rng.choice(problems) for _ in problems)
    return torch.tensor([float(counts[g]) for g in groups], dtype=torch.float64)


def fit_ensemble(x: torch.Tensor, t: StepTensors, groups: Sequence[int], *, lam: float | None = None,
                 members: int = MEMBERS, seed: int = 0, full: regularized.Fit | None = None) -> Ensemble:
    """M converged heads on problem bootstraps, at the L2 chosen once on all labels, warm-started."""
    full = full or regularized.fit_converged(x, t, groups, lam=lam, seed=seed)
    return bootstrap(x, t, groups, full=full, members=members, seed=seed)


def bootstrap(x: torch.Tensor, t: StepTensors, groups: Sequence[int], *, full: regularized.Fit, members: int,
              seed: int) -> Ensemble:
    z = full.standardizer(x)
    rng = random.Random(seed)
    ws, bs = [], []
    for _ in range(members):
        m = bootstrap_weights(groups, rng)
        resampled = StepTensors(k=t.k, n=t.n, pos_weight=t.pos_weight.double() * m,
                                neg_weight=t.neg_weight.double() * m)
        w, b = regularized.solve(z, resampled, lam=full.lam, start=(full.w, full.b))
        w_raw, b_raw = full.standardizer.raw(w, b)
        ws.append(w_raw)
        bs.append(b_raw)
    return Ensemble(torch.stack(ws), torch.stack(bs).reshape(-1))


def predicted_first_error(probs: torch.Tensor, threshold: float = THRESHOLD) -> list[int]:
    """Per member ([M, n] probabilities): index of the first step below threshold, -1 if none."""
    below = probs < threshold
    any_below = below.any(1)
    first = below.double().argmax(1)
    return [int(f) if a else -1 for f, a in zip(first.tolist(), any_below.tolist())]


def solution_uncertainty(probs: torch.Tensor, *, quantile: float = UPPER_QUANTILE) -> SolutionUncertainty:
    """The three selection numbers from one solution's [M, n_steps] member probabilities."""
    if probs.shape[1] == 0:
        return SolutionUncertainty(0.0, 0.0, 1.0)
    votes = Counter(predicted_first_error(probs))
    product = probs.clamp_min(1e-12).log().sum(1).exp()
    return SolutionUncertainty(
        spread=float(probs.std(0, unbiased=False).max()),
        first_error_disagreement=1.0 - votes.most_common(1)[0][1] / probs.shape[0],
        upper_score=float(torch.quantile(product, quantile)),
    )


def uncertainties(ensemble: Ensemble, features: Sequence[torch.Tensor]) -> list[SolutionUncertainty]:
    """One SolutionUncertainty per solution's [n_steps, D] features (one matrix product for all)."""
    if not features:
        return []
    probs = ensemble.probabilities(torch.cat(list(features)))
    out, start = [], 0
    for h in features:
        out.append(solution_uncertainty(probs[:, start:start + h.shape[0]]))
        start += h.shape[0]
    return out


# --- production: from labeled rows, for pool solutions ------------------------------------------


def fit_from_rows(rows, *, backbone, cache, backbone_id: str, layer: int, members: int = MEMBERS,
                  seed: int = 0) -> Ensemble:
    """An ensemble on retraining.gather_rows() rows (importance weights included), features cached."""
    from scoring.training.losses import step_tensors
    from scoring.training_data import TrainConfig, build_examples

    examples = build_examples(rows)
    if not examples:
        raise ValueError("no labeled steps to fit an ensemble on")
    t = step_tensors(examples, TrainConfig(bias_correction="importance"))
    hs = cache.features(backbone, [(e.row.problem, list(e.row.steps)) for e in examples], layer=layer,
                        backbone_id=backbone_id)
    x = torch.cat([h[[i for i, n in enumerate(e.n) if n > 0]] for h, e in zip(hs, examples)])
    groups = [e.row.problem_id for e in examples for n in e.n if n > 0]
    return fit_ensemble(x, t, groups, members=members, seed=seed)


def pool_uncertainty(ensemble: Ensemble, solution_ids, *, backbone, cache, backbone_id: str,
                     layer: int) -> dict[int, SolutionUncertainty]:
    """solution id -> SolutionUncertainty, what selection.rebuild_queue(uncertainty=...) takes."""
    from scoring.scoring import read_items

    ids, _, items = read_items(list(solution_ids))
    features = cache.features(backbone, items, layer=layer, backbone_id=backbone_id)
    return dict(zip(ids, uncertainties(ensemble, features)))


def for_model_version(model_version, solution_ids, *, members: int = MEMBERS) -> dict[int, SolutionUncertainty]:
    """What rebuild_queue uses when the shares ask for an ensemble reason and none was given:
    an ensemble on every trainable label, on the version's backbone features (cached; a pool
    solution not in the cache costs one backbone pass). Empty without labels or for a model
    that is not a head on a backbone (its reasons' shares then go to random picks)."""
    from scoring import prm, registry, retraining, training
    from scoring.models import ModelVersion

    if model_version.kind != ModelVersion.Kind.HEAD:
        return {}
    rows = retraining.gather_rows()
    if not any(any(r is not None for r in ratings) for row in rows for ratings in row.ratings):
        return {}
    config = prm.read_model_config(model_version.path)
    folder = prm.backbone_folder(model_version.path, config)
    loaded = registry.load(model_version)
    layer = (config.get("head") or {}).get("layer")
    layer = layer if layer is not None else training.default_layer(loaded.model.config.num_hidden_layers)
    where = {"backbone": loaded, "cache": retraining.feature_cache(), "layer": layer,
             "backbone_id": training.backbone_fingerprint(folder)}
    return pool_uncertainty(fit_from_rows(rows, members=members, **where), solution_ids, **where)
