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

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from django.conf import settings
from safetensors import safe_open
from safetensors.torch import save_file

from scoring.core import prm, training
from scoring.core.training import regularized, truncated
from scoring.core.training.losses import StepTensors, step_tensors
from scoring.core.training_data import TrainConfig, build_examples
from scoring.models import ModelVersion
from scoring.rescoring import label_rows, scores
from scoring.store import registry
from steps.arithmetic import predicted_first_error

logger = logging.getLogger(__name__)

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


def solution_uncertainty(probs: torch.Tensor, *, quantile: float = UPPER_QUANTILE) -> SolutionUncertainty:
    """The three selection numbers from one solution's [M, n_steps] member probabilities."""
    if probs.shape[1] == 0:
        return SolutionUncertainty(0.0, 0.0, 1.0)
    votes = Counter(predicted_first_error(member, THRESHOLD) for member in probs.tolist())
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
    """An ensemble on label_rows.gather_rows() rows (importance weights included), features cached."""
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

    ids, _, items = scores.read_items(list(solution_ids))
    features = cache.features(backbone, items, layer=layer, backbone_id=backbone_id)
    return dict(zip(ids, uncertainties(ensemble, features)))


def for_model_version(model_version, solution_ids, *, project,
                      members: int = MEMBERS) -> dict[int, SolutionUncertainty]:
    """What rebuild_queue uses when the shares ask for an ensemble reason and none was given:
    the version's ensemble on every trainable label of the project (`fitted_for_version`: fitted once per
    labels, stored) and the pool's uncertainties under it (`pool_uncertainty_for`: computed
    once per solution, stored). Empty without labels or for a model that is not a head on a
    backbone (its reasons' shares then go to random picks)."""
    if model_version.kind != ModelVersion.Kind.HEAD:
        return {}
    rows = label_rows.gather_rows(project=project)
    if not any(any(r is not None for r in ratings) for row in rows for ratings in row.ratings):
        return {}
    fitted = fitted_for_version(model_version, rows, members=members)
    return pool_uncertainty_for(model_version, fitted, solution_ids)


# --- the stored ensemble: one per (model version, labels), in the data dir -----------------------
#
# A rebuild after a rescore and every /api/score call read the same artifact: the heads as
# safetensors (never pickle) with what they were fitted on in the header, and beside them the
# pool's uncertainties under those heads. Refitting is needed only when the labeled rows (or
# their importance weights) change; a pool solution's numbers only when the ensemble does.

ENSEMBLE_FILE = "ensemble.safetensors"
# Pool solutions read per round trip: bounds memory and the size of one IN (...) list.
UNCERTAINTY_CHUNK = 5000
FORMAT = 1  # bump when what is stored, or how it is fitted, changes meaning


@dataclass(frozen=True)
class Fitted:
    """A model version's stored ensemble: the heads, the layer they read, what they were fitted on."""

    ensemble: Ensemble
    layer: int | None
    labels: str  # labels_fingerprint() of the rows it was fitted on


def store_dir(model_version) -> Path:
    """The version's folder under settings.ENSEMBLES_DIR (name and weights: a re-registered name
    with other weights gets its own)."""
    return Path(settings.ENSEMBLES_DIR) / f"{model_version.name}-{model_version.weights_sha256[:16]}"


def labels_fingerprint(rows, *, members: int, seed: int) -> str:
    """sha256 of everything a fit reads from the labeled rows (texts, ratings, counts, weights)."""
    payload = json.dumps([FORMAT, members, seed, [dataclasses.astuple(row) for row in rows]])
    return hashlib.sha256(payload.encode()).hexdigest()


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """An exclusive lock on a version's ensemble folder: two workers rebuilding at once fit once;
    the second waits, then finds the first's files."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield  # closing the file releases the lock, even when the holder dies


def fitted_for_version(model_version, rows, *, members: int = MEMBERS, seed: int = 0) -> Fitted:
    """The version's ensemble for these labeled rows: the stored one when it was fitted on
    exactly these rows, else fitted now on cached features and stored (a missing, torn or
    corrupt file is refitted, never trusted)."""
    labels = labels_fingerprint(rows, members=members, seed=seed)
    folder = store_dir(model_version)
    with locked(folder):
        fitted = read_fitted(folder / ENSEMBLE_FILE)
        if fitted is not None and fitted.labels == labels:
            return fitted
        where = feature_source(model_version)
        fitted = Fitted(fit_from_rows(rows, members=members, seed=seed, **where), where["layer"], labels)
        write_atomically(folder / ENSEMBLE_FILE, {"weights": fitted.ensemble.weights, "biases": fitted.ensemble.biases},
                         metadata={"labels": labels, "layer": json.dumps(fitted.layer)})
        for stale in folder.glob("uncertainty-*.safetensors"):
            stale.unlink(missing_ok=True)
        return fitted


def stored_ensemble(model_version) -> Fitted | None:
    """The version's last fitted ensemble, as it is (never fits): what /api/score reports a
    spread with. None for a model that is not a head, or before its first rebuild with labels."""
    if model_version.kind != ModelVersion.Kind.HEAD:
        return None
    return read_fitted(store_dir(model_version) / ENSEMBLE_FILE)


def read_fitted(path: Path) -> Fitted | None:
    """The stored ensemble, or None when the file is missing or not one (logged: it is refitted)."""
    tensors = read_tensors(path)
    if tensors is None:
        return None
    found, metadata = tensors
    try:
        weights, biases = found["weights"], found["biases"]
        assert weights.ndim == 2 and biases.shape == (weights.shape[0],) and bool(weights.isfinite().all())
        return Fitted(Ensemble(weights.double(), biases.double()), json.loads(metadata["layer"]), metadata["labels"])
    except (AssertionError, KeyError, TypeError, ValueError):
        logger.warning("%s is not an ensemble of this format; refitting", path)
        return None


def pool_uncertainty_for(model_version, fitted: Fitted, solution_ids) -> dict[int, SolutionUncertainty]:
    """solution id -> uncertainty under the stored ensemble: read from the version's file, with
    only the solutions it does not hold yet featurized (feature cache) and added."""
    folder = store_dir(model_version)
    path = folder / f"uncertainty-{fitted.labels[:16]}.safetensors"
    wanted = list(solution_ids)
    with locked(folder):
        known = read_uncertainties(path)
        added = computed_uncertainty(model_version, fitted, [pk for pk in wanted if pk not in known])
        if added:  # (a solution without steps gets no numbers: nothing to write for it)
            known.update(added)
            ids = sorted(known)
            write_atomically(path, {
                "solution_ids": torch.tensor(ids, dtype=torch.int64),
                "values": torch.tensor([dataclasses.astuple(known[pk]) for pk in ids], dtype=torch.float64)
                .reshape(len(ids), 3),
            })
    return {pk: known[pk] for pk in wanted if pk in known}


def computed_uncertainty(model_version, fitted: Fitted, solution_ids: list[int]) -> dict[int, SolutionUncertainty]:
    """pool_uncertainty in chunks, on the version's backbone (loaded only when there is work)."""
    if not solution_ids:
        return {}
    where, out = feature_source(model_version), {}
    for start in range(0, len(solution_ids), UNCERTAINTY_CHUNK):
        out.update(pool_uncertainty(fitted.ensemble, solution_ids[start:start + UNCERTAINTY_CHUNK], **where))
    return out


def read_uncertainties(path: Path) -> dict[int, SolutionUncertainty]:
    tensors = read_tensors(path)
    if tensors is None:
        return {}
    found, _ = tensors
    ids, values = found.get("solution_ids", torch.empty(0)), found.get("values", torch.empty(0))
    if values.shape != (len(ids), 3):
        logger.warning("%s holds %s values for %s solutions; recomputing", path, tuple(values.shape), len(ids))
        return {}
    return {pk: SolutionUncertainty(*row) for pk, row in zip(ids.tolist(), values.tolist())}


def read_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]] | None:
    """A safetensors file's tensors and header metadata; None if missing or unreadable."""
    if not path.exists():
        return None
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {name: handle.get_tensor(name) for name in handle.keys()}, handle.metadata() or {}
    except Exception as error:  # safetensors raises its own error type for a bad header
        logger.warning("%s is unreadable (%s: %s); it will be rebuilt", path, type(error).__name__, error)
        return None


def write_atomically(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    save_file({name: t.contiguous() for name, t in tensors.items()}, str(tmp), metadata=metadata)
    os.replace(tmp, path)  # a reader (another worker, /api/score) never sees half a file


def feature_source(model_version) -> dict:
    """The version's frozen backbone, feature cache and read-out layer: what fitting and
    featurizing the pool take (the backbone loads once per worker, in the registry)."""
    config = prm.read_model_config(model_version.path)
    folder = prm.backbone_folder(model_version.path, config)
    loaded = registry.load(model_version)
    assert isinstance(loaded, prm.LoadedPRM)  # callers pass head versions only: loaded here, not remote
    layer = (config.get("head") or {}).get("layer")
    layer = layer if layer is not None else training.default_layer(loaded.model.config.num_hidden_layers)
    return {"backbone": loaded, "cache": label_rows.feature_cache(), "layer": layer,
            "backbone_id": training.backbone_fingerprint(folder)}


def scored_with_spread(loaded, fitted: Fitted, items) -> tuple[list[list], list[list[float]]]:
    """For /api/score: (step probabilities, per step the spread of p over the members). One
    backbone pass when the head reads the ensemble's layer (a trained head does: both take the
    training layer), else a second pass for the head; nothing is written to the feature cache."""
    # Read exactly as the feature cache reads what the ensemble was fitted on.
    with truncated(loaded.model, fitted.layer) as read_at:
        features = loaded.step_features(items, layer=read_at)
    spreads = [fitted.ensemble.spread(h) for h in features]
    if loaded.kind == "head" and loaded.config["head"].get("layer") == fitted.layer:
        return [loaded.head.probabilities(h) for h in features], spreads
    return loaded.step_probabilities(items), spreads
