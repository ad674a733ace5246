"""How good a PRM is: step AUC, ProcessBench F1, best-of-N and calibration.

Plain numpy on plain inputs (no Django, no sklearn), so the numbers can be checked by
hand in tests and computed the same way by `eval_prm`, the promotion gate and the GPU
script. Every function takes per-step probabilities that a model already produced.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from steps import arithmetic


@dataclass(frozen=True)
class LabeledSample:
    """One labeled solution: model probabilities per step and the human step labels.

    `labels[i]` is 1 (step fine), 0 (step wrong) or None (no label: after the first
    error, or not rated). `first_error` is the index of the first wrong step, None if none.
    """

    problem_id: int
    probs: Sequence[float]
    labels: Sequence[int | None]
    first_error: int | None
    is_reference: bool = False


@dataclass(frozen=True)
class Candidate:
    """One graded solution to a problem, for best-of-N.

    `count` is how many of the problem's samples were this solution (identical responses
    are stored once): best-of-N draws from the samples, so majority vote counts each.
    """

    mu: Sequence[float]
    correct: bool
    answer: str | None = None
    sigma: Sequence[float] | None = None
    count: int = 1


def samples_of(candidates: Sequence[Candidate]) -> list[Candidate]:
    """One entry per sample: a candidate written `count` times appears `count` times."""
    return [c for c in candidates for _ in range(max(1, c.count))]


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float | None:
    """Area under the ROC curve (Mann-Whitney U with tie-averaged ranks); None if one class."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=int)
    n_pos, n_neg = int((y == 1).sum()), int((y == 0).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = _average_ranks(s)
    u = ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


def _average_ranks(values: np.ndarray) -> np.ndarray:
    # 1-based ranks; tied values share the mean of the ranks they span. Vectorized: the
    # promotion gate's bootstrap computes thousands of AUCs.
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return (ends - (counts - 1) / 2)[inverse].astype(float)


def paired_auc(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Share of (corrupted step k, reference step k) pairs where the reference scores higher.

    Ties count half. Comparing the same step position of the same problem removes the
    position and problem effects that inflate a plain step AUC.
    """
    if not pairs:
        return None
    wins = sum(1.0 if ref > bad else 0.5 if ref == bad else 0.0 for bad, ref in pairs)
    return wins / len(pairs)


def reference_pairs(samples: Sequence[LabeledSample]) -> list[tuple[float, float]]:
    """(score of the first wrong step, score of the same step of the problem's reference)."""
    references = {s.problem_id: s for s in samples if s.is_reference}
    pairs = []
    for sample in samples:
        ref = references.get(sample.problem_id)
        k = sample.first_error
        if sample.is_reference or ref is None or k is None or k >= len(ref.probs) or k >= len(sample.probs):
            continue
        pairs.append((float(sample.probs[k]), float(ref.probs[k])))
    return pairs


def processbench_f1(samples: Sequence[LabeledSample], threshold: float = 0.5) -> dict[str, Any]:
    """ProcessBench: exact first-error accuracy on erroneous samples and on correct ones.

    F1 is their harmonic mean; None when either group is empty.
    """
    erroneous = [s for s in samples if s.first_error is not None]
    correct = [s for s in samples if s.first_error is None]
    acc_err = _mean([arithmetic.predicted_first_error(s.probs, threshold) == s.first_error for s in erroneous])
    acc_ok = _mean([arithmetic.predicted_first_error(s.probs, threshold) is None for s in correct])
    f1 = None
    if acc_err is not None and acc_ok is not None:
        f1 = 0.0 if acc_err + acc_ok == 0 else 2 * acc_err * acc_ok / (acc_err + acc_ok)
    return {"threshold": threshold, "acc_erroneous": acc_err, "acc_correct": acc_ok, "f1": f1,
            "n_erroneous": len(erroneous), "n_correct": len(correct)}


def _mean(values: Sequence[float | bool]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def solution_score(mu: Sequence[float], how: str, sigma: Sequence[float] | None = None, lam: float = 1.0) -> float:
    """A candidate's score for best-of-N: the step core's aggregation (risk included); no steps score 0."""
    return arithmetic.aggregate(mu, how, sigmas=sigma, lam=lam) if len(mu) else 0.0


def best_of_n(
    problems: Sequence[Sequence[Candidate]],
    *,
    ns: Sequence[int] | None = None,
    draws: int = 32,
    lam: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Accuracy of picking 1 of N candidates per aggregation, vs majority vote and oracle.

    For each N (1, 2, 4, ... up to the largest candidate set unless given) and each
    problem with at least N samples, `draws` random subsets of its samples are scored
    (a candidate counts `count` times); the accuracy is averaged over subsets and then over
    problems. "last" is the outcome-model-like baseline (only the final step's score),
    "majority" is self-consistency by answer.
    """
    rng = np.random.default_rng(seed)
    problems = [samples_of(cands) for cands in problems]
    if ns is None:
        largest = max((len(c) for c in problems), default=0)
        ns = [2**i for i in range(int(math.log2(largest)) + 1)] if largest else []
    methods = [*arithmetic.AGGREGATIONS_WITH_RISK, "majority", "oracle"]
    table: dict[str, dict[str, float | int]] = {}
    for n in ns:
        eligible = [c for c in problems if len(c) >= n]
        if not eligible:
            continue
        hits = dict.fromkeys(methods, 0.0)
        for cands in eligible:
            picks = _subsets(len(cands), n, draws, rng)
            for m in methods:
                hits[m] += float(np.mean([_choose(cands, subset, m, lam, rng) for subset in picks]))
        table[str(n)] = {m: hits[m] / len(eligible) for m in methods} | {"problems": len(eligible)}
    return {"lambda": lam, "draws": draws, "by_n": table}


def _subsets(total: int, n: int, draws: int, rng: np.random.Generator) -> list[np.ndarray]:
    if n == total:
        return [np.arange(total)]
    if n == 1:
        return [np.array([i]) for i in range(total)]  # exact: every single candidate once
    return [rng.choice(total, size=n, replace=False) for _ in range(draws)]


def _choose(cands: Sequence[Candidate], subset: np.ndarray, method: str, lam: float, rng: np.random.Generator) -> float:
    chosen = [cands[int(i)] for i in subset]
    if method == "oracle":
        return any(c.correct for c in chosen)
    if method == "majority":
        votes = Counter(c.answer for c in chosen if c.answer is not None)
        if not votes:
            return bool(chosen[int(rng.integers(len(chosen)))].correct)
        top = max(votes.values())
        winners = sorted(a for a, v in votes.items() if v == top)
        answer = winners[int(rng.integers(len(winners)))]
        return next(c.correct for c in chosen if c.answer == answer)
    scores = [solution_score(c.mu, method, c.sigma, lam) for c in chosen]
    # Ties are broken at random, counted exactly as the tied candidates' mean correctness:
    # taking the first would let a constant scorer look perfect when candidates arrive
    # in a favourable order (references first, say).
    best = max(scores)
    tied = [c.correct for c, score in zip(chosen, scores) if score == best]
    return float(np.mean(tied))


def calibration(probs: Sequence[float], labels: Sequence[int], bins: int = 10) -> dict[str, Any]:
    """Expected calibration error over equal-width bins, and the reliability diagram's data."""
    p = np.asarray(probs, dtype=float)
    y = np.asarray(labels, dtype=float)
    if p.size == 0:
        return {"ece": None, "bins": []}
    index = np.minimum((p * bins).astype(int), bins - 1)
    rows, ece = [], 0.0
    for b in range(bins):
        mask = index == b
        count = int(mask.sum())
        if count == 0:
            continue
        confidence, accuracy = float(p[mask].mean()), float(y[mask].mean())
        ece += count / p.size * abs(accuracy - confidence)
        rows.append({"lo": b / bins, "hi": (b + 1) / bins, "confidence": confidence,
                     "accuracy": accuracy, "count": count})
    return {"ece": ece, "bins": rows}


def step_arrays(samples: Sequence[LabeledSample]) -> tuple[list[float], list[int]]:
    """Flatten labeled steps (label not None) into parallel score and label lists."""
    scores, labels = [], []
    for s in samples:
        for p, y in zip(s.probs, s.labels):
            if y is not None:
                scores.append(float(p))
                labels.append(int(y))
    return scores, labels


def evaluate(
    samples: Sequence[LabeledSample],
    problems: Sequence[Sequence[Candidate]] = (),
    *,
    threshold: float = 0.5,
    lam: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    """All metrics of one model on one held-out set, as a JSON-ready dict."""
    scores, labels = step_arrays(samples)
    return {
        "n_solutions": len(samples),
        "n_steps": len(labels),
        "positive_rate": _mean(labels),
        "step_auc": roc_auc(scores, labels),
        "paired_auc": paired_auc(reference_pairs(samples)),
        "processbench": processbench_f1([s for s in samples if not s.is_reference], threshold),
        "calibration": calibration(scores, labels),
        "mean_prob": _mean(scores),
        "best_of_n": best_of_n(problems, lam=lam, seed=seed) if problems else None,
    }


# Which way is better for each metric the promotion gate may use.
GATE_METRICS = {
    "step_auc": ("step_auc", True),
    "paired_auc": ("paired_auc", True),
    "processbench_f1": ("processbench.f1", True),
    "ece": ("calibration.ece", False),
}


def metric_value(metrics: dict[str, Any], name: str) -> float | None:
    """Read a gate metric out of an `evaluate` dict by its dotted path."""
    path, _ = GATE_METRICS[name]
    value: object = metrics
    for key in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value if isinstance(value, (int, float)) else None


def not_worse(new: dict[str, Any], current: dict[str, Any], metric: str, tolerance: float = 0.0) -> bool:
    """The promotion gate: the new model's metric is at least the current one's.

    Without a value for the new model (e.g. the held-out steps are all good, so no AUC)
    there is no evidence it is not worse, and it does not pass.
    """
    _, higher_is_better = GATE_METRICS[metric]
    a, b = metric_value(new, metric), metric_value(current, metric)
    if a is None:
        return False
    if b is None:
        return True
    return a >= b - tolerance if higher_is_better else a <= b + tolerance


def gate_metric(samples: Sequence[LabeledSample], metric: str, threshold: float = 0.5) -> float | None:
    """One gate metric computed straight from samples: what `metric_value(evaluate(...))` reads."""
    if metric == "step_auc":
        return roc_auc(*step_arrays(samples))
    if metric == "paired_auc":
        return paired_auc(reference_pairs(samples))
    if metric == "processbench_f1":
        f1: float | None = processbench_f1([s for s in samples if not s.is_reference], threshold)["f1"]
        return f1
    if metric == "ece":
        ece: float | None = calibration(*step_arrays(samples))["ece"]
        return ece
    raise ValueError(f"unknown gate metric {metric!r}; expected one of {', '.join(GATE_METRICS)}")


@dataclass(frozen=True)
class PairedGain:
    """How much better the new model is than the current one on the same held-out solutions.

    `gain` is positive when the new model is better (for ECE: lower). `low`/`high` bound the
    `confidence` interval of the gain over `resamples` bootstrap resamples in which both
    models' metric could be measured; all three are None when no resample could be.
    """

    gain: float | None
    low: float | None
    high: float | None
    resamples: int
    confidence: float


def paired_bootstrap(
    new: Sequence[LabeledSample],
    current: Sequence[LabeledSample],
    metric: str,
    *,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    threshold: float = 0.5,
) -> PairedGain:
    """The gain in `metric` of `new` over `current`, with a paired percentile bootstrap interval.

    Both lists hold the same solutions in the same order, each scored by one model. Each
    resample draws the labeled (non-reference) solutions with replacement, the same draw for
    both models, and recomputes the metric for each: the interval reflects which solutions
    happened to be held out, and the pairing cancels what the models share (hard solutions
    are hard for both). References are kept in every resample: paired AUC looks them up.
    """
    if len(new) != len(current) or any(a.problem_id != b.problem_id for a, b in zip(new, current)):
        raise ValueError("a paired bootstrap needs both models scored on the same solutions in the same order")
    sign = 1.0 if GATE_METRICS[metric][1] else -1.0
    labeled = [i for i, s in enumerate(new) if not s.is_reference]
    references = [i for i, s in enumerate(new) if s.is_reference]

    def gain(indices: Sequence[int]) -> float | None:
        a = gate_metric([new[i] for i in indices], metric, threshold)
        b = gate_metric([current[i] for i in indices], metric, threshold)
        return None if a is None or b is None else sign * (a - b)

    point = gain(labeled + references)
    rng = np.random.default_rng(seed)
    gains = []
    for _ in range(resamples if labeled else 0):
        drawn = rng.choice(labeled, size=len(labeled), replace=True)
        value = gain([int(i) for i in drawn] + references)
        if value is not None:
            gains.append(value)
    if point is None or not gains:
        return PairedGain(point, None, None, len(gains), confidence)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(gains, [tail, 100 - tail])
    return PairedGain(point, float(low), float(high), len(gains), confidence)
