"""Active learning where the backbone itself learns: SmolLM2 fine-tuned with LoRA each round.

The frozen-backbone benchmark (`bench.simulation_scale`) fits a linear head on features
cached once; the generated domain (`bench.learnable_domain`) trains an MLP from scratch.
Here the scorer is the product's own `lora` training mode (`scoring.core.training.train`
with `TrainConfig(mode="lora")`) on real GSM8K solutions with one corrupted step
(`simulation_pool.gsm8k_problems`): every round a fresh copy of the backbone gets LoRA
adapters and a new head, is trained on the labels so far, and rescores the pool.

What the CPU cannot afford, and what stands in for it:
- Rescoring the whole pool each round is the expensive part, so each round scores a seeded
  random subsample of the unlabeled pool (`candidates` solutions) and selection chooses
  among those: a queue rebuilt from a partly rescored pool.
- The backbone is cut to its first `layer` decoder layers (`shallow`: the head reads that
  layer, the layers above never run), and solutions longer than
  `max_tokens` are left out of the pool.
- No ensemble: one more LoRA fit per member per round is out of reach, so the ensemble
  reasons are not measured here.

Everything else is the product's or the other benchmarks' own: labels as gather_rows hands
them over (`simulation_scale.labeled_rows`, importance-weighted), selection through
`selection.select`, rollout soft labels drawn as `learnable_domain.rollout_labels` draws
them and ranked by `selection.rollout_disagreement`, held-out metrics from
`simulation.evaluate_probs`, curves and labels-needed ratios from `simulation_report`.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from bench import learnable_domain
from bench.simulation import HeldOut, curve_point, evaluate_probs
from bench.simulation_pool import PoolProblem
from bench.simulation_scale import Features, Pool, labeled_rows
from scoring.core import prm
from scoring.core.encoding import Item
from scoring.core.training import decoder_layers_owner, load_backbone, train
from scoring.core.training_data import TrainConfig
from scoring.rescoring import selection

# The product's reasons by their shares; `rollout_disagreement` ranks by the rollouts-vs-PRM gap.
POLICIES: dict[str, dict[str, float]] = {
    "random": {"random": 1.0},
    "convincing_wrong": {"convincing_wrong": 1.0},
    "default_mix": {"convincing_wrong": 0.5, "random": 0.5},
    "rollout_disagreement": {"rollout_disagreement": 1.0},
    "rollout_random": {"rollout_disagreement": 0.5, "random": 0.5},
}
ROLLOUT_POLICIES = {name for name, shares in POLICIES.items() if "rollout_disagreement" in shares}


@dataclass(frozen=True)
class LoraSettings:
    budgets: list[int]
    policies: list[str]
    seeds: list[int]
    candidates: int = 300  # unlabeled solutions rescored per round
    layer: int = 6  # decoder layers run (and LoRA-adapted); the head reads this layer
    max_tokens: int = 256
    epochs: int = 1
    batch_size: int = 8
    lora_r: int = 8
    lr: float = 3e-3  # the head
    backbone_lr: float = 3e-4  # the LoRA adapters
    per_problem: int = 2

    def train_config(self, seed: int) -> TrainConfig:
        # val_fraction 0: every label trains (the benchmark measures on its own held-out problems).
        return TrainConfig(mode="lora", layer=self.layer, epochs=self.epochs, batch_size=self.batch_size,
                           lora_r=self.lora_r, lora_alpha=2 * self.lora_r, lr=self.lr, backbone_lr=self.backbone_lr,
                           val_fraction=0.0, seed=seed)

    def validate(self, pool_size: int) -> None:
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown:
            raise ValueError(f"--policies: unknown {', '.join(unknown)} (use {', '.join(POLICIES)})")
        if "random" not in self.policies:
            raise ValueError("--policies: random is the reference every ratio needs")
        if len(self.budgets) < 2 or self.budgets[0] < 2 or any(b <= a for a, b in zip(self.budgets, self.budgets[1:])):
            raise ValueError("--budgets: increasing label counts, at least two, the first at least 2")
        if self.budgets[-1] > pool_size:
            raise ValueError(f"--budgets: {self.budgets[-1]} labels asked, the pool has {pool_size} solutions")
        largest_round = max(b - a for a, b in zip(self.budgets, self.budgets[1:]))
        if self.candidates < largest_round:
            raise ValueError(f"--candidates: {self.candidates} rescored per round, fewer than the "
                             f"{largest_round} labels one round picks")


# --- the pool -----------------------------------------------------------------------------------------


def fitting(problems: Sequence[PoolProblem], backbone: prm.LoadedPRM, *, max_tokens: int) -> list[PoolProblem]:
    """The problems with only their solutions that encode to at most `max_tokens` tokens; a
    problem left with one solution goes, as the pool builders drop it."""
    out = []
    for problem in problems:
        kept = [s for s in problem.solutions
                if len(backbone.encode(problem.statement, s.steps).ids) <= max_tokens]
        if len(kept) > 1:
            out.append(PoolProblem(problem.statement, problem.answer, kept))
    return out


def flat_pool(problems: Sequence[PoolProblem]) -> Pool:
    """The pool flattened per solution, as `simulation_scale.labeled_rows` reads it (no cached
    features: this regime reads the backbone live)."""
    flat = [(pid, p.statement, s) for pid, p in enumerate(problems) for s in p.solutions]
    pool = Pool([f[0] for f in flat], [f[1] for f in flat], [f[2].steps for f in flat],
                [f[2].first_error for f in flat], Features(torch.empty(0, 1), [0]))
    right = sum(e is None for e in pool.first_error)
    pool.strata = {True: right, False: len(pool.first_error) - right}
    return pool


# --- one round's scorer -----------------------------------------------------------------------------------


@dataclass
class Scorer:
    """A LoRA-trained backbone (adapters merged) with its head, read at the training layer."""

    loaded: prm.LoadedPRM
    layer: int
    fit_seconds: float
    tokens: int

    def probabilities(self, items: Sequence[Item]) -> list[list[float]]:
        self.loaded.config["head"]["layer"] = self.layer  # the (shallow) backbone's last hidden state
        return [[s.p for s in steps] for steps in self.loaded.step_probabilities(items)]


def shallow(backbone: prm.LoadedPRM, layer: int) -> prm.LoadedPRM:
    """The backbone cut to its first `layer` decoder layers, no final norm: hidden_states[layer]
    is then what `training.truncated` reads at `layer` on the full model. Cut for good, because
    `truncated` finds no layers to skip through peft's wrapper (`decoder_layers_owner` returns the
    PeftModel, whose `layers` is forwarded), so LoRA training would run every layer and read the last."""
    owner = decoder_layers_owner(backbone.model)
    if owner is None or not isinstance(owner.layers, torch.nn.ModuleList) or not 0 < layer <= len(owner.layers):
        raise ValueError(f"layer={layer}: the backbone has no decoder layers 1..{layer} to keep")
    owner.layers, owner.norm = torch.nn.ModuleList(owner.layers[:layer]), torch.nn.Identity()
    backbone.model.config.num_hidden_layers = layer
    return backbone


def fit_round(backbone_folder: Path, separator: str, pool: Pool, chosen: Sequence[int], settings: LoraSettings, *,
              seed: int) -> Scorer:
    """LoRA on a fresh copy of the backbone (training merges the adapters into the model it is
    given), trained on what the simulated annotator labeled in `chosen`."""
    # float32 weights (training keeps them so; on a GPU the forward runs under bf16 autocast).
    backbone = shallow(load_backbone(backbone_folder, separator=separator, dtype=torch.float32), settings.layer)
    started = time.perf_counter()
    result = train(labeled_rows(pool, chosen, bias_correction="importance"), backbone=backbone,
                   config=settings.train_config(seed))
    assert result.backbone is not None  # lora mode returns the merged backbone
    backbone.model, backbone.head = result.backbone, result.head
    return Scorer(backbone, settings.layer, time.perf_counter() - started, result.tokens)


# --- the loop --------------------------------------------------------------------------------------------


def candidates(pool: Pool, scorer: Scorer, rows: Sequence[int], *, rollouts: Sequence[list[float]] | None,
               ) -> list[selection.Candidate]:
    """selection.Candidate for each of `rows` (unlabeled solutions), scored by the round's model."""
    probs = scorer.probabilities([(pool.statements[i], pool.steps[i]) for i in rows])
    out = []
    for i, ps in zip(rows, probs):
        score = float(torch.tensor(ps).clamp_min(1e-12).log().sum().exp())
        c = selection.Candidate(i, pool.problems[i], pool.first_error[i] is None, score, None)
        if rollouts is not None:
            c.rollout_disagreement = selection.rollout_disagreement(rollouts[i], ps)
        out.append(c)
    return out


def measure(held_out: HeldOut, scorer: Scorer, pool: Pool, chosen: Sequence[int]) -> dict:
    started = time.perf_counter()
    probs = scorer.probabilities(held_out.items)
    wrong = sum(pool.first_error[i] is not None for i in chosen)
    return curve_point(evaluate_probs(held_out, probs, best_of_n=False)) | {
        "labels": len(chosen), "wrong_share": wrong / len(chosen),
        "labeled_steps": sum(len(r.ratings[0]) - r.ratings[0].count(None)
                             for r in labeled_rows(pool, chosen, bias_correction="none")),
        "fit_seconds": round(scorer.fit_seconds, 1), "train_tokens": scorer.tokens,
        "held_out_seconds": round(time.perf_counter() - started, 1)}


def run_seed(pool_problems: Sequence[PoolProblem], held_out_problems: Sequence[PoolProblem], settings: LoraSettings, *,
             seed: int, backbone: Path, separator: str, log: Callable[[str], None] = lambda _: None,
             on_curve: Callable[[str, list[dict]], None] = lambda *_: None) -> dict[str, list[dict]]:
    """One learning curve per policy; every policy continues from the same random first pick,
    and round r rescores the same-seeded candidate draw from what each policy left unlabeled."""
    pool, held_out = flat_pool(pool_problems), HeldOut.from_problems(held_out_problems)
    rng = random.Random(seed)
    rollouts = [learnable_domain.rollout_labels(f, len(s), rng) for f, s in zip(pool.first_error, pool.steps)]
    first = random.Random(seed).sample(range(len(pool)), settings.budgets[0])
    first_scorer = fit_round(backbone, separator, pool, first, settings, seed=seed)
    start = measure(held_out, first_scorer, pool, first)
    curves = {}
    for name in settings.policies:
        chosen, scorer, points = list(first), first_scorer, [start]
        for round_number, budget in enumerate(settings.budgets[1:], start=1):
            labeled = set(chosen)
            unlabeled = [i for i in range(len(pool)) if i not in labeled]
            draw = random.Random(seed * 1000 + round_number)
            drawn = draw.sample(unlabeled, min(settings.candidates, len(unlabeled)))
            scored = candidates(pool, scorer, drawn, rollouts=rollouts if name in ROLLOUT_POLICIES else None)
            policy = selection.Policy(size=budget - len(chosen), shares=POLICIES[name],
                                      per_problem=settings.per_problem, seed=seed * 1000 + round_number)
            chosen += [pick.candidate.solution_id for pick in selection.select(scored, policy)]
            scorer = fit_round(backbone, separator, pool, chosen, settings, seed=seed)
            points.append(measure(held_out, scorer, pool, chosen))
            log(f"seed {seed} {name} {len(chosen)} labels: step AUC {points[-1]['step_auc']:.3f}, "
                f"fit {points[-1]['fit_seconds']} s")
        curves[name] = points
        on_curve(name, points)
    return curves
