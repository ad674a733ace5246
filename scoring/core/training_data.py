"""What training learns from, without torch: the run config, label counting, the split
and selection-bias weights. The web process validates a run's options with this module
before queueing it, so it must stay importable without loading a model stack.
"""
from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from steps.ratings import ALLOWED, Rating, is_error, is_good, is_rating

NEUTRAL_MODES = ("positive", "negative", "ignore")
HEAD_TYPES = ("point", "beta")
MODES = ("head", "topk", "lora", "full")
BIAS_CORRECTIONS = ("none", "class", "importance")
# Which labels a run learns from: annotators' (the default), rollouts'/imports' (AutoStepLabel), or both;
# a judge's verdicts alone; or the steps where rollouts and the judge agree (Qwen's consensus filtering).
# Judge labels reach training only through the last two: "automatic" and "both" never include them.
LABEL_SOURCES = ("human", "automatic", "both", "judge", "consensus")
FITS = ("sgd", "converged")  # head mode: fixed epochs of Adam, or L2 logistic solved to convergence


@dataclass
class TrainConfig:
    """Everything that decides a run; stored verbatim in the checkpoint's meta.json."""

    head: str = "point"
    mode: str = "head"
    labels: str = "human"
    layer: int | None = None  # hidden_states index; None = the parent's, else ~60 % depth
    neutral: str = "positive"
    val_fraction: float = 0.2
    epochs: int = 30
    batch_size: int = 256  # labeled steps per batch (head mode) / solutions per batch (others)
    lr: float = 1e-3
    backbone_lr: float = 2e-5
    kappa_lr_multiplier: float = 10.0
    kappa_init: float = 4.0
    lam: float = 0.05
    weight_decay: float = 0.01
    bias_correction: str = "importance"
    target_base_rate: float | None = None  # class weighting; None = the importance-weighted rate
    topk: int = 2
    lora_r: int = 8
    lora_alpha: int = 16
    gradient_checkpointing: bool = False
    max_tokens: int = 4096
    seed: int = 0
    # "converged": head mode solves an L2 logistic head to convergence, L2 chosen by CV by problem
    # (scoring/core/training/regularized.py); measured to learn from fewer labels (docs/active-learning.md).
    fit: str = "sgd"

    def validate(self) -> None:
        """Fail naming the bad field before any work starts."""
        choices = {"head": HEAD_TYPES, "mode": MODES, "neutral": NEUTRAL_MODES, "bias_correction": BIAS_CORRECTIONS,
                   "labels": LABEL_SOURCES, "fit": FITS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r}; expected one of {', '.join(allowed)}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction={self.val_fraction}; expected 0 <= val_fraction < 1")
        if self.target_base_rate is not None and not 0.0 < self.target_base_rate < 1.0:
            raise ValueError(f"target_base_rate={self.target_base_rate}; expected strictly between 0 and 1")
        for name in ("epochs", "batch_size", "topk", "lora_r", "max_tokens"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}={getattr(self, name)}; expected a positive integer")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown training option(s): {', '.join(sorted(unknown))}")
        config = cls(**data)
        config.validate()
        return config


# --- labels -> examples -------------------------------------------------------------------


@dataclass(frozen=True)
class LabeledRow:
    """One labeled solution as the Django side hands it over.

    `ratings` holds one list per annotator (or rollout batch) with a rating per step
    (-1, 0, +1, or None when that step was not rated). `counts` holds automatic labels as
    (K positive, N) per step, (0, 0) where there is none: rollouts' K of N, added to what
    the ratings give. `weight` is an importance weight for selection bias, 1.0 when unknown.
    """

    solution_id: int
    problem_id: int
    problem: str
    steps: tuple[str, ...]
    ratings: tuple[tuple[int | None, ...], ...]
    weight: float = 1.0
    counts: tuple[tuple[int, int], ...] = ()


@dataclass
class Example:
    """A labeled solution ready for training: K positive of N labels per step."""

    row: LabeledRow
    k: list[int]
    n: list[int]

    @property
    def labeled_steps(self) -> int:
        return sum(1 for n in self.n if n > 0)

    @property
    def automatic_labels(self) -> int:
        return sum(n for _, n in self.row.counts)

    @property
    def human_labels(self) -> int:
        return sum(self.n) - self.automatic_labels


def step_counts(
    ratings: Sequence[Sequence[int | None]], n_steps: int, *, neutral: str = "positive"
) -> tuple[list[int], list[int]]:
    """(K positive, N labels) per step; each annotator stops counting after their first -1."""
    if neutral not in NEUTRAL_MODES:
        raise ValueError(f"neutral={neutral!r}; expected one of {', '.join(NEUTRAL_MODES)}")
    k, n = [0] * n_steps, [0] * n_steps
    for annotator in ratings:
        for index, rating in enumerate(annotator[:n_steps]):
            if rating is None or (rating == Rating.NEUTRAL and neutral == "ignore"):
                continue
            if not is_rating(rating):
                raise ValueError(f"rating {rating!r} at step {index}; expected one of {ALLOWED}")
            n[index] += 1
            if is_error(rating):
                break  # PRM800K: supervise up to the first error only
            k[index] += int(is_good(rating, neutral_is_good=neutral == "positive"))
    return k, n


def build_examples(rows: Sequence[LabeledRow], *, neutral: str = "positive") -> list[Example]:
    """Examples for every row with at least one labeled step: human ratings plus automatic counts."""
    examples = []
    for row in rows:
        k, n = step_counts(row.ratings, len(row.steps), neutral=neutral)
        for index, (auto_k, auto_n) in enumerate(row.counts[: len(row.steps)]):
            k[index] += auto_k
            n[index] += auto_n
        if any(n):
            examples.append(Example(row=row, k=k, n=n))
    return examples


def problem_hash(problem_id: int, seed: int) -> float:
    """A stable number in [0, 1) per problem: the split never moves a problem as data grows."""
    digest = hashlib.sha256(f"{seed}:{problem_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_validation_problem(problem_id: int, *, val_fraction: float, seed: int) -> bool:
    return problem_hash(problem_id, seed) < val_fraction


def validation_problems(problem_ids: Sequence[int], *, val_fraction: float, seed: int) -> set[int]:
    """The held-out problems among these.

    A problem's side depends only on its id and the seed, so the held-out problems of
    one run stay held out in the next and the gate compares both models on unseen data.
    With at least two problems and a positive fraction, one problem is always held out
    and one always trained on.
    """
    problems = sorted(set(problem_ids))
    val = {p for p in problems if is_validation_problem(p, val_fraction=val_fraction, seed=seed)}
    if not val and val_fraction > 0 and len(problems) >= 2:
        val = {min(problems, key=lambda p: problem_hash(p, seed))}
    if val and val == set(problems):
        val.discard(max(problems, key=lambda p: problem_hash(p, seed)))
    return val


def split_by_problem(
    examples: Sequence[Example], *, val_fraction: float, seed: int
) -> tuple[list[Example], list[Example]]:
    """Train/validation split by problem, never by solution."""
    val = validation_problems([e.row.problem_id for e in examples], val_fraction=val_fraction, seed=seed)
    return [e for e in examples if e.row.problem_id not in val], [e for e in examples if e.row.problem_id in val]


# --- selection-bias correction --------------------------------------------------------------

Stratum = TypeVar("Stratum", bound=Hashable)


def stratum_weights(strata: Sequence[Stratum], population: Mapping[Stratum, float]) -> list[float]:
    """Importance weights so the labeled set's strata mix matches the population's.

    Active selection may serve 90 % wrong-answer solutions; weighting each labeled
    solution by P_pool(stratum) / P_labeled(stratum) restores the pool's mix (strata
    absent from the population keep weight 1).
    """
    counts: dict[Stratum, int] = {}
    for s in strata:
        counts[s] = counts.get(s, 0) + 1
    pool_total = sum(population.get(s, 0) for s in counts)
    if not strata or pool_total <= 0:
        return [1.0] * len(strata)
    return [
        (population[s] / pool_total) / (counts[s] / len(strata)) if population.get(s) else 1.0
        for s in strata
    ]


def class_weights(positive: float, total: float, target: float) -> tuple[float, float]:
    """(w+, w-) that move an observed positive rate to the target base rate."""
    rate = positive / total if total else target
    if rate <= 0 or rate >= 1:
        return 1.0, 1.0
    return target / rate, (1 - target) / (1 - rate)
