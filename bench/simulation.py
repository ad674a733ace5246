"""The active-learning benchmark: what each selection strategy buys, measured through the real loop.

A pool of problems whose solutions have a known first error (references plus variants with
one corrupted step, see `bench.corruption` and `annotate.pool.synthetic`) is written into the
database. Then, per strategy and seed, rounds of the production loop run:

    select B solutions    scoring.rescoring.selection.rebuild_queue with the strategy's Policy
    label them            a simulated annotator claims each through annotate.labeling.queueing and
                          rates it through annotate.labeling.actions (+1 before the known first
                          error, -1 at it, stop there: the PRM800K rule)
    retrain               label_rows.gather_rows -> training.train (head only, on cached
                          frozen-backbone features: the CPU default)
    rescore               scores.score_solutions, with the cached-feature fast path
                          (training.step_probabilities)
    evaluate              scoring.core.evaluation on held-out problems never in the pool

Each (strategy, seed) run happens in a transaction that is rolled back, so every run starts
from the same unlabeled pool; callers run the whole thing in a scratch database
(`scratch_database`), so the real pool is never touched. The pool is built in
`bench.simulation_pool`; curves, the efficiency ratio and the plot in `bench.simulation_report`.

Only two things are not the production path, both for speed, neither changing a number:
model versions are recorded without hashing the 540 MB backbone each round (nothing is
loaded by hash here), and a trained head scores with the already loaded backbone.
"""
from __future__ import annotations

import contextlib
import dataclasses
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.db import connections, transaction

from annotate.labeling import actions as labeling
from annotate.labeling import queueing
from bench.simulation_pool import (
    PoolProblem,
    arithmetic_ok,
    describe,
    known_ratings,
    position_probabilities,
    write_problems,
)
from bench.simulation_report import efficiency, summarize
from scoring.core import evaluation
from scoring.core.training_data import TrainConfig
from scoring.models import ModelVersion
from scoring.rescoring import label_rows, scores, selection
from steps.ratings import is_error

if TYPE_CHECKING:
    from scoring.core import prm, training
    from scoring.core.encoding import Item

STRATEGIES = ("random", "convincing_wrong", "uncertainty", "mix")


# --- the simulated annotator --------------------------------------------------------------------


def label_queue(*, annotator, limit: int) -> list[int]:
    """Claim and label up to `limit` tasks through the real queue and labeling code."""
    labeled = []
    for _ in range(limit):
        annotation = queueing.claim_next(annotator=annotator)
        if annotation is None:
            break
        solution = annotation.solution
        n_steps = annotation.step_labels.count()
        for index, rating in enumerate(known_ratings(n_steps, solution.meta["first_error"])):
            labeling.rate(annotation=annotation, index=index, rating=rating)
        labeling.submit(annotation=annotation)
        labeled.append(solution.pk)
    return labeled


# --- models on cached features -----------------------------------------------------------------


@dataclass
class Backbone:
    """The frozen backbone every run shares, with its feature cache."""

    loaded: prm.LoadedPRM
    cache: training.FeatureCache
    backbone_id: str
    layer: int

    def with_head(self, head: prm.StepHead) -> prm.LoadedPRM:
        config = self.loaded.config | {"head": head.config(self.layer)}
        return dataclasses.replace(self.loaded, config=config, head=head, forward_passes=0)

    def probabilities(self, loaded: prm.LoadedPRM, items: Sequence[Item]) -> list[list[prm.StepProbability]]:
        from scoring.core import training

        return training.step_probabilities(loaded, items, cache=self.cache, backbone_id=self.backbone_id)


@dataclass
class CachedScorer:
    """What scores.score_solutions calls `prm`: step probabilities through the feature cache."""

    backbone: Backbone
    loaded: prm.LoadedPRM

    def step_probabilities(self, items):
        return self.backbone.probabilities(self.loaded, items)


def load_backbone(folder: Path, *, cache_dir: Path, layer: int | None = None, dtype=None) -> Backbone:
    from scoring.core import training

    loaded = training.load_backbone(folder, dtype=dtype)
    layer = layer if layer is not None else training.default_layer(loaded.model.config.num_hidden_layers)
    return Backbone(loaded, training.FeatureCache(cache_dir), training.backbone_fingerprint(folder), layer)


def record_version(name: str, backbone: Backbone, head: prm.StepHead) -> ModelVersion:
    return ModelVersion.objects.create(name=name, path="(simulation: in memory)", weights_sha256="-",
                                       config={"kind": "head", "head": head.config(backbone.layer)})


def untrained_head(backbone: Backbone, seed: int) -> prm.StepHead:
    """Generation 0: a seeded untrained beta head (its scores only feed the random first pick)."""
    import torch

    from scoring.core import prm as prm_module

    torch.manual_seed(seed)
    return prm_module.StepHead(backbone.loaded.model.config.hidden_size, "beta")


# --- held-out evaluation ---------------------------------------------------------------------


@dataclass
class HeldOut:
    """Held-out problems: every solution with its known labels, the reference marked."""

    problem_ids: list[int]
    solutions: list[tuple[int, str, list[str], int | None, bool, str]]  # problem, text, steps, first error, ref, answer

    @classmethod
    def from_problems(cls, problems: Sequence[PoolProblem]) -> HeldOut:
        """Kept out of the database: never scored into the pool, never selected, never in the strata."""
        rows = [(pid, p.statement, s.steps, s.first_error, s.first_error is None, s.answer)
                for pid, p in enumerate(problems) for s in p.solutions]
        return cls(list(range(len(problems))), rows)

    @property
    def items(self) -> list[Item]:
        return [(problem, steps) for _, problem, steps, *_ in self.solutions]


def evaluate_probs(held_out: HeldOut, probs: Sequence[Sequence[float]], sigmas=None, *,
                   best_of_n: bool = True) -> dict:
    """The production metrics (scoring.core.evaluation) plus solution-level AUC, on one set of scores.
    `best_of_n=False` leaves out best-of-N, by far the slowest metric on thousands of solutions."""
    samples, by_problem = [], {}
    for index, ((problem_id, _, steps, first, is_ref, answer), p) in enumerate(zip(held_out.solutions, probs)):
        labels = [1 if first is None or i < first else 0 if i == first else None for i in range(len(steps))]
        samples.append(evaluation.LabeledSample(problem_id, list(p), labels, first))
        if is_ref:  # the reference again, as the pair partner of its problem's corrupted steps
            samples.append(evaluation.LabeledSample(problem_id, list(p), labels, None, is_reference=True))
        sigma = list(sigmas[index]) if sigmas is not None else None
        by_problem.setdefault(problem_id, []).append(
            evaluation.Candidate(mu=list(p), correct=first is None, answer=answer, sigma=sigma))
    labeled = [s for s in samples if not s.is_reference]
    # Best-of-N breaks ties by position: shuffle (seeded) so the reference is not first on ties.
    candidate_lists = [random.Random(pid).sample(cands, len(cands))
                       for pid, cands in sorted(by_problem.items())] if best_of_n else []
    report = evaluation.evaluate(samples, candidate_lists)
    # evaluate() counts each reference twice in step AUC (labeled and as pair partner): recompute on `labeled`.
    report["step_auc"] = evaluation.roc_auc(*evaluation.step_arrays(labeled))
    candidates = [c for cands in by_problem.values() for c in cands]
    report["solution_auc"] = evaluation.roc_auc([evaluation.solution_score(c.mu, "product") for c in candidates],
                                                [int(c.correct) for c in candidates])
    return report


def curve_point(report: dict) -> dict:
    """The handful of numbers a learning curve plots, from an evaluation report."""
    bon = (report.get("best_of_n") or {}).get("by_n", {})
    top = bon[max(bon, key=int)] if bon else {}
    return {
        "paired_auc": report["paired_auc"],
        "step_auc": report["step_auc"],
        "solution_auc": report["solution_auc"],
        "processbench_f1": report["processbench"]["f1"],
        "best_of_n": top.get("product"),
        # Same subsets, other pickers: majority vote by answer and the last step's score (outcome-like).
        "best_of_n_majority": top.get("majority"),
        "best_of_n_last": top.get("last"),
        "best_of_n_n": int(max(bon, key=int)) if bon else None,
        "ece": report["calibration"]["ece"],
    }


def baselines(pool: Sequence[PoolProblem], held_out: HeldOut) -> dict:
    position = position_probabilities(pool)
    fallback = min(position.values()) if position else 0.5
    by_position = [[position.get(i, fallback) for i in range(len(steps))] for _, _, steps, *_ in held_out.solutions]
    by_rule = [[0.9 if arithmetic_ok(step) else 0.1 for step in steps] for _, _, steps, *_ in held_out.solutions]
    return {"position_only": curve_point(evaluate_probs(held_out, by_position)),
            "rule_based": curve_point(evaluate_probs(held_out, by_rule))}


# --- the loop ----------------------------------------------------------------------------------


@dataclass
class Settings:
    rounds: int = 5
    batch: int = 20
    initial: int = 20
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6, 7)
    strategies: tuple[str, ...] = STRATEGIES
    epochs: int = 30  # TrainConfig's defaults: the production head training
    lr: float = 1e-3

    def validate(self) -> None:
        unknown = set(self.strategies) - set(STRATEGIES)
        if unknown:
            raise ValueError(f"--strategies: unknown {', '.join(sorted(unknown))} (use {', '.join(STRATEGIES)})")
        if self.rounds < 1 or self.batch < 1 or self.initial < 2 or not self.seeds:
            raise ValueError("--rounds and --batch must be >= 1, --initial >= 2, and at least one seed given")


def policy_for(strategy: str, *, size: int, seed: int) -> selection.Policy:
    shares = {
        "random": {"random": 1.0},
        "convincing_wrong": {"convincing_wrong": 1.0},
        "uncertainty": {"uncertain": 1.0},
        # The production default before the in-memory loop (the ensemble reasons need simulation_scale's loop).
        "mix": {"convincing_wrong": 0.4, "convincing": 0.2, "uncertain": 0.1, "random": 0.3},
    }[strategy]
    # The per-problem cap a new project starts with (a simulation has no project of its own).
    return selection.Policy(size=size, shares=shares, per_problem=django_settings.STEPWISE_QUEUE_PER_PROBLEM, seed=seed)


@dataclass
class Context:
    backbone: Backbone
    pool_ids: list[int]
    held_out: HeldOut
    settings: Settings
    log: Callable[[str], None] = field(default=lambda message: None)


def run_seed(ctx: Context, *, seed: int) -> dict[str, list[dict]]:
    """One learning curve per strategy for a seed; everything written is rolled back.

    The first, random pick is labeled and trained on once and shared by every strategy
    (a paired comparison, and the labeling is the slow part); each strategy then continues
    from it in a savepoint of its own.
    """
    curves: dict[str, list[dict]] = {}
    with transaction.atomic():
        annotator = get_user_model().objects.create(username=f"simulated-annotator-{seed}")
        first = policy_for("random", size=ctx.settings.initial, seed=seed)
        head, start = one_round(ctx, annotator=annotator, head=untrained_head(ctx.backbone, seed), policy=first,
                                seed=seed, name=f"sim-{seed}-0")
        for strategy in ctx.settings.strategies:
            with transaction.atomic():
                points, strategy_head = [start], head
                for round_number in range(1, ctx.settings.rounds + 1):
                    policy = policy_for(strategy, size=ctx.settings.batch, seed=seed * 1000 + round_number)
                    strategy_head, point = one_round(ctx, annotator=annotator, head=strategy_head, policy=policy,
                                                     seed=seed, name=f"sim-{seed}-{strategy}-{round_number}")
                    points.append(point)
                curves[strategy] = points
                transaction.set_rollback(True)
            ctx.log(f"seed {seed} {strategy}: paired AUC {_f(start['paired_auc'])} -> {_f(points[-1]['paired_auc'])}")
        transaction.set_rollback(True)
    return curves


def one_round(ctx: Context, *, annotator, head: prm.StepHead, policy: selection.Policy, seed: int,
              name: str) -> tuple[prm.StepHead, dict]:
    """Rescore the pool with `head`, queue the policy's picks, label them, retrain, evaluate."""
    from scoring.core import training

    version = record_version(name, ctx.backbone, head)
    scores.score_solutions(model_version=version, solution_ids=ctx.pool_ids,
                            prm=CachedScorer(ctx.backbone, ctx.backbone.with_head(head)))
    selection.rebuild_queue(model_version=version, policy=policy)
    label_queue(annotator=annotator, limit=policy.size)
    rows = label_rows.gather_rows()
    config = TrainConfig(head="beta", mode="head", layer=ctx.backbone.layer, epochs=ctx.settings.epochs,
                         lr=ctx.settings.lr, seed=seed)
    result = training.train(rows, backbone=ctx.backbone.loaded, config=config, cache=ctx.backbone.cache,
                            backbone_id=ctx.backbone.backbone_id)
    return result.head, measure_round(ctx, result.head, rows)


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def measure_round(ctx: Context, head: prm.StepHead, rows) -> dict:
    results = ctx.backbone.probabilities(ctx.backbone.with_head(head), ctx.held_out.items)
    probs = [[s.p for s in steps] for steps in results]
    sigmas = [[s.sigma or 0.0 for s in steps] for steps in results]
    point = curve_point(evaluate_probs(ctx.held_out, probs, sigmas))
    wrong = sum(1 for r in rows if any(any(map(is_error, ratings)) for ratings in r.ratings))
    return point | {"labels": len(rows), "labeled_steps": sum(sum(x is not None for x in r.ratings[0]) for r in rows),
                    "wrong_share": wrong / len(rows) if rows else None}


def simulate(*, backbone: Backbone, pool: Sequence[PoolProblem], held_out: Sequence[PoolProblem],
             sim: Settings, source: str = "simulation", log=lambda message: None) -> dict:
    """Write the pool, run every (strategy, seed), and return the benchmark's JSON-ready result."""
    sim.validate()
    started = time.perf_counter()
    pool_ids = write_problems(pool, split="pool", source=source)
    evaluation_set = HeldOut.from_problems(held_out)
    # Fill the feature cache once (the backbone's only forward passes), with progress.
    featurize_started, before = time.perf_counter(), backbone.cache.computed_tokens
    items = scores.read_items(pool_ids)[2] + evaluation_set.items
    for start in range(0, len(items), 64):
        backbone.cache.features(backbone.loaded, items[start:start + 64], layer=backbone.layer,
                                backbone_id=backbone.backbone_id)
        log(f"features {min(start + 64, len(items))}/{len(items)}")
    featurize_seconds = time.perf_counter() - featurize_started
    ctx = Context(backbone, pool_ids, evaluation_set, sim, log)
    curves: dict[str, list[list[dict]]] = {s: [] for s in sim.strategies}
    loop_started = time.perf_counter()
    for seed in sim.seeds:
        for strategy, points in run_seed(ctx, seed=seed).items():
            curves[strategy].append(points)
    return {
        "settings": dataclasses.asdict(sim) | {"layer": backbone.layer},
        "pool": describe(pool),
        "held_out": describe(held_out),
        "baselines": baselines(pool, evaluation_set),
        "strategies": {s: summarize(c) for s, c in curves.items()},
        "efficiency_ratio": efficiency(curves) if "random" in curves else {},
        "timing": {"featurize_seconds": featurize_seconds,
                   "featurized_tokens": backbone.cache.computed_tokens - before,
                   "loop_seconds": time.perf_counter() - loop_started,
                   "total_seconds": time.perf_counter() - started},
    }


# --- scratch database and plot ------------------------------------------------------------------


@contextlib.contextmanager
def scratch_database() -> Iterator[str]:
    """A fresh, migrated database for the run (in-memory for SQLite), dropped afterwards."""
    from django.test.utils import setup_databases, teardown_databases

    connection = connections["default"]
    test = connection.settings_dict.setdefault("TEST", {})
    saved = dict(test)
    sqlite = connection.vendor == "sqlite"
    test["NAME"] = None if sqlite else f"{connection.settings_dict['NAME']}_simulation"
    try:
        old = setup_databases(verbosity=0, interactive=False, aliases={"default"}, serialized_aliases=set())
        try:
            yield connection.settings_dict["NAME"]
        finally:
            teardown_databases(old, verbosity=0)
    finally:
        test.clear()
        test.update(saved)


def stderr_log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
