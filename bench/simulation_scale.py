"""The active-learning benchmark at pool scale: in memory, on features computed once.

`simulation.simulate` runs every round through the database (score_solutions writes a score
per pool solution, rebuild_queue, claim/rate/submit per label, gather_rows). At 10,000 pool
solutions and 8 seeds x 7 strategies x 8 rounds that is the bottleneck (measured: see
docs/active-learning.md), so this loop keeps the same decisions in memory and calls the same
owners for each of them:

    select     selection.select (the pure core of rebuild_queue) on selection.Candidate rows,
               with the ensemble's uncertainty for the ensemble reasons
    label      simulation_pool.known_ratings (what the simulated annotator answers)
    weights    training_data.stratum_weights over the pool's answer-correctness mix (what
               label_rows.gather_rows does), or none, for the bias-correction comparison
    train      training_data.build_examples + training.step_tensors + the converged head
               (training.regularized, what TrainConfig(fit="converged") runs)
    ensemble   scoring.rescoring.ensemble on the same labels
    evaluate   simulation.evaluate_probs on held-out problems never in the pool

Features come from the shared FeatureCache (one backbone pass per solution, ever).
"""
from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from bench.simulation import HeldOut, baselines, curve_point, evaluate_probs
from bench.simulation_pool import PoolProblem, describe, known_ratings
from bench.simulation_report import efficiency, summarize
from scoring.core.training import regularized
from scoring.core.training.losses import step_tensors
from scoring.core.training_data import LabeledRow, TrainConfig, build_examples, stratum_weights
from scoring.rescoring import ensemble as ensemble_module
from scoring.rescoring import selection

# strategy -> selection shares (selection.REASONS). "mix" is the pre-benchmark production default.
STRATEGIES: dict[str, dict[str, float]] = {
    "random": {"random": 1.0},
    "convincing_wrong": {"convincing_wrong": 1.0},
    "uncertainty": {"uncertain": 1.0},
    "disagreement": {"disagreement": 1.0},
    "first_error_disagreement": {"first_error_disagreement": 1.0},
    "uncertain_convincing_wrong": {"uncertain_convincing_wrong": 1.0},
    "mix": {"convincing_wrong": 0.4, "convincing": 0.2, "uncertain": 0.1, "random": 0.3},
}
ENSEMBLE_REASONS = selection.ENSEMBLE_REASONS
KAPPA = 4.0  # TrainConfig.kappa_init: the converged head's constant concentration, for sigma


@dataclass
class ScaleSettings:
    budgets: tuple[int, ...] = (50, 100, 200, 400, 700, 1000, 1500, 2000)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6, 7)
    strategies: tuple[str, ...] = tuple(STRATEGIES)
    members: int = ensemble_module.MEMBERS
    per_problem: int = 2
    bias_correction: str = "importance"  # or "none"
    rank: int = regularized.RANK  # principal directions of the pool the head may use

    def validate(self, pool_size: int) -> None:
        unknown = [s for s in self.strategies if s not in STRATEGIES and "=" not in s]
        if unknown:
            raise ValueError(f"--strategies: unknown {', '.join(unknown)} (use {', '.join(STRATEGIES)} "
                             "or shares like disagreement=0.5,random=0.5)")
        if list(self.budgets) != sorted(set(self.budgets)) or self.budgets[0] < 2:
            raise ValueError("--budgets: increasing label counts, the first at least 2")
        if self.budgets[-1] > pool_size:
            raise ValueError(f"--budgets: {self.budgets[-1]} labels asked, the pool has {pool_size} solutions")


def shares_for(strategy: str) -> dict[str, float]:
    if strategy in STRATEGIES:
        return STRATEGIES[strategy]
    return selection.parse_shares(strategy)


@dataclass
class Features:
    """Step features of a set of solutions, stacked: rows of solution i are offsets[i]:offsets[i+1]."""

    x: torch.Tensor
    offsets: list[int]

    @classmethod
    def of(cls, per_solution: Sequence[torch.Tensor]) -> Features:
        offsets = [0]
        for h in per_solution:
            offsets.append(offsets[-1] + h.shape[0])
        # float64 once: every head and ensemble product reads it so (a no-op .double() per round).
        return cls(torch.cat(list(per_solution)).double(), offsets)

    def rows(self, i: int) -> torch.Tensor:
        return self.x[self.offsets[i]:self.offsets[i + 1]]

    def split(self, values: torch.Tensor) -> list[torch.Tensor]:
        return [values[..., self.offsets[i]:self.offsets[i + 1]] for i in range(len(self.offsets) - 1)]


@dataclass
class Pool:
    """The pool flattened per solution: what selection and the simulated annotator need."""

    problems: list[int]
    statements: list[str]
    steps: list[list[str]]
    first_error: list[int | None]
    features: Features
    strata: dict[bool, int] = field(default_factory=dict)
    # Standardization and principal directions of the whole (unlabeled) pool's step features.
    standardizer: regularized.Standardizer | None = None

    @classmethod
    def of(cls, problems: Sequence[PoolProblem], features: Sequence[torch.Tensor], *,
           rank: int = regularized.RANK) -> Pool:
        flat = [(pid, p.statement, s) for pid, p in enumerate(problems) for s in p.solutions]
        pool = cls([f[0] for f in flat], [f[1] for f in flat], [f[2].steps for f in flat],
                   [f[2].first_error for f in flat], Features.of(features))
        right = sum(e is None for e in pool.first_error)
        pool.strata = {True: right, False: len(pool.first_error) - right}
        pool.standardizer = regularized.principal_standardizer(pool.features.x, rank)
        return pool

    def __len__(self) -> int:
        return len(self.problems)


def labeled_rows(pool: Pool, chosen: Sequence[int], *, bias_correction: str) -> list[LabeledRow]:
    """What gather_rows would hand over after the simulated annotator labeled `chosen`."""
    correct = [pool.first_error[i] is None for i in chosen]
    weights = stratum_weights(correct, pool.strata) if bias_correction == "importance" else [1.0] * len(chosen)
    rows = []
    for i, weight in zip(chosen, weights):
        ratings = known_ratings(len(pool.steps[i]), pool.first_error[i])
        rows.append(LabeledRow(solution_id=i, problem_id=pool.problems[i], problem=pool.statements[i],
                               steps=tuple(pool.steps[i]),
                               ratings=(tuple(ratings) + (None,) * (len(pool.steps[i]) - len(ratings)),),
                               weight=weight))
    return rows


@dataclass
class RoundModel:
    fit: regularized.Fit
    ensemble: ensemble_module.Ensemble | None


def train_round(pool: Pool, rows: Sequence[LabeledRow], *, members: int, seed: int) -> RoundModel:
    examples = build_examples(rows)
    t = step_tensors(examples, TrainConfig(bias_correction="importance"))  # the rows carry the weights
    x = torch.cat([pool.features.rows(e.row.solution_id)[[j for j, n in enumerate(e.n) if n > 0]] for e in examples])
    groups = [e.row.problem_id for e in examples for n in e.n if n > 0]
    fit = regularized.fit_converged(x, t, groups, seed=seed, standardizer=pool.standardizer)
    ens = ensemble_module.fit_ensemble(x, t, groups, members=members, seed=seed, full=fit) if members > 1 else None
    return RoundModel(fit, ens)


def pool_candidates(pool: Pool, model: RoundModel, labeled: set[int], *, need_ensemble: bool) -> list:
    """selection.Candidate per unlabeled solution, scored by the round's head (and ensemble)."""
    p = torch.sigmoid(model.fit.logits(pool.features.x))
    per_solution = pool.features.split(p)
    sigma = pool.features.split(torch.sqrt(p * (1 - p) / (KAPPA + 1)))
    unc = None
    if need_ensemble and model.ensemble is not None:
        member_probs = pool.features.split(model.ensemble.probabilities(pool.features.x))
        unc = {i: ensemble_module.solution_uncertainty(member_probs[i]) for i in range(len(pool)) if i not in labeled}
    out = []
    for i in range(len(pool)):
        if i in labeled:
            continue
        score = float(per_solution[i].clamp_min(1e-12).log().sum().exp())
        out.append(selection.Candidate(i, pool.problems[i], pool.first_error[i] is None, score,
                                       float(sigma[i].mean())))
    return selection.with_uncertainty(out, unc or {})


def measure(held_out: HeldOut, held_features: Features, model: RoundModel, rows, pool: Pool) -> dict:
    p = torch.sigmoid(model.fit.logits(held_features.x))
    probs = [v.tolist() for v in held_features.split(p)]
    point = curve_point(evaluate_probs(held_out, probs))
    wrong = sum(pool.first_error[r.solution_id] is not None for r in rows)
    return point | {"labels": len(rows), "labeled_steps": sum(sum(x is not None for x in r.ratings[0]) for r in rows),
                    "wrong_share": wrong / len(rows), "lambda": model.fit.lam}


def run_seed(pool: Pool, held_out: HeldOut, held_features: Features, sim: ScaleSettings, *, seed: int,
             log: Callable[[str], None]) -> dict[str, list[dict]]:
    """One curve per strategy; every strategy continues from the same random first pick."""
    first = random.Random(seed).sample(range(len(pool)), sim.budgets[0])
    first_rows = labeled_rows(pool, first, bias_correction=sim.bias_correction)
    first_model = train_round(pool, first_rows, members=sim.members, seed=seed)
    start = measure(held_out, held_features, first_model, first_rows, pool)
    curves = {}
    for strategy in sim.strategies:
        shares = shares_for(strategy)
        need_ensemble = bool(ENSEMBLE_REASONS & set(shares))
        chosen, model, points = list(first), first_model, [start]
        for round_number, budget in enumerate(sim.budgets[1:], start=1):
            policy = selection.Policy(size=budget - len(chosen), shares=shares, per_problem=sim.per_problem,
                                      seed=seed * 1000 + round_number)
            picks = selection.select(pool_candidates(pool, model, set(chosen), need_ensemble=need_ensemble), policy)
            chosen += [pick.candidate.solution_id for pick in picks]
            rows = labeled_rows(pool, chosen, bias_correction=sim.bias_correction)
            model = train_round(pool, rows, members=sim.members if need_ensemble else 0, seed=seed)
            points.append(measure(held_out, held_features, model, rows, pool))
        curves[strategy] = points
        log(f"seed {seed} {strategy}: paired AUC {start['paired_auc']:.3f} -> {points[-1]['paired_auc']:.3f} "
            f"at {points[-1]['labels']} labels")
    return curves


def simulate_scale(*, pool_problems: Sequence[PoolProblem], held_problems: Sequence[PoolProblem],
                   features: Callable[[list], list[torch.Tensor]], sim: ScaleSettings,
                   log: Callable[[str], None] = lambda message: None,
                   on_seed: Callable[[dict], None] = lambda partial: None) -> dict:
    """Featurize (through the cache) once, then run every (seed, strategy); JSON-ready result.

    `on_seed` gets the result over the seeds done so far after each seed: an hour-long run that
    is stopped still leaves its finished seeds behind.
    """
    started = time.perf_counter()
    pool_items = [(p.statement, s.steps) for p in pool_problems for s in p.solutions]
    held_out = HeldOut.from_problems(held_problems)
    pool = Pool.of(pool_problems, features(pool_items), rank=sim.rank)
    held_features = Features.of(features(held_out.items))
    sim.validate(len(pool))
    timing = {"featurize_seconds": time.perf_counter() - started, "seed_seconds": []}
    context = {"pool": describe(pool_problems), "held_out": describe(held_problems),
               "baselines": baselines(pool_problems, held_out)}
    curves: dict[str, list[list[dict]]] = {s: [] for s in sim.strategies}
    result: dict = {}
    for seed in sim.seeds:
        seed_started = time.perf_counter()
        for strategy, points in run_seed(pool, held_out, held_features, sim, seed=seed, log=log).items():
            curves[strategy].append(points)
        timing["seed_seconds"].append(time.perf_counter() - seed_started)
        log(f"seed {seed} done in {timing['seed_seconds'][-1]:.0f} s")
        timing |= {"loop_seconds": sum(timing["seed_seconds"]), "total_seconds": time.perf_counter() - started}
        result = report(curves, sim, context, timing)
        on_seed(result)
    return result


def report(curves: dict[str, list[list[dict]]], sim: ScaleSettings, context: dict, timing: dict) -> dict:
    """The JSON-ready result over the seeds in `curves`."""
    summary = {s: summarize(c) for s, c in curves.items()}
    for s, c in curves.items():
        summary[s]["lambda"] = [math.exp(sum(math.log(run[i]["lambda"]) for run in c) / len(c))
                                for i in range(len(sim.budgets))]
    seeds_done = list(sim.seeds[:len(next(iter(curves.values())))])
    return {
        "settings": {"budgets": list(sim.budgets), "seeds": seeds_done, "strategies": list(sim.strategies),
                     "members": sim.members, "rank": sim.rank, "per_problem": sim.per_problem,
                     "bias_correction": sim.bias_correction,
                     "head": "converged L2 logistic (training.regularized)"},
        **context,
        "strategies": summary,
        "efficiency_ratio": efficiency(curves) if "random" in curves else {},
        "timing": dict(timing),
    }


# Settings that must agree for runs over different seeds to be one measurement.
SAME_RUN = ("budgets", "strategies", "members", "rank", "per_problem", "bias_correction", "head",
            "pool", "problems", "heldout", "layer", "backbone")


def curves_of(result: dict) -> dict[str, list[list[dict]]]:
    """The per-seed curves back from a result's summaries (each point's L2 is its run's mean)."""
    curves = {}
    for strategy, summary in result["strategies"].items():
        metrics = [key for key, value in summary.items() if isinstance(value, dict) and "per_seed" in value]
        curves[strategy] = [[{"labels": n, "lambda": summary["lambda"][i]}
                             | {m: summary[m]["per_seed"][k][i] for m in metrics}
                             for i, n in enumerate(summary["labels"])] for k in range(summary["seeds"])]
    return curves


def merge(results: Sequence[dict]) -> dict:
    """One result from runs of the same protocol over disjoint seeds (run side by side on a
    machine with idle cores): the curves, intervals and ratios as if one run had done them all."""
    first = results[0]["settings"]
    for other in results[1:]:
        differing = [key for key in SAME_RUN if other["settings"].get(key) != first.get(key)]
        if differing:
            raise ValueError(f"--merge: the runs differ in {', '.join(differing)}")
    seeds = [seed for r in results for seed in r["settings"]["seeds"]]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--merge: a seed appears twice ({sorted(seeds)})")
    order = sorted(range(len(results)), key=lambda i: min(results[i]["settings"]["seeds"]))
    parts = [curves_of(results[i]) for i in order]
    curves = {s: [run for part in parts for run in part[s]] for s in first["strategies"]}
    sim = ScaleSettings(budgets=tuple(first["budgets"]), seeds=tuple(sorted(seeds)),
                        strategies=tuple(first["strategies"]), members=first["members"],
                        per_problem=first["per_problem"], bias_correction=first["bias_correction"],
                        rank=first["rank"])
    timing = {"parts": [results[i]["timing"] for i in order]}
    context = {key: results[0][key] for key in ("pool", "held_out", "baselines")}
    merged = report(curves, sim, context, timing)
    merged["settings"] |= {key: first[key] for key in SAME_RUN if key in first}
    return merged
