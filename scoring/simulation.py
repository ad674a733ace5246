"""The active-learning benchmark: what each selection strategy buys, measured through the real loop.

A pool of problems whose solutions have a known first error (references plus variants with
one corrupted step, see `annotate.corruption` and `annotate.synthetic`) is written into the
database. Then, per strategy and seed, rounds of the production loop run:

    select B solutions    scoring.selection.rebuild_queue with the strategy's Policy
    label them            a simulated annotator claims each through annotate.queueing and
                          rates it through annotate.labeling (+1 before the known first
                          error, -1 at it, stop there: the PRM800K rule)
    retrain               retraining.gather_rows -> training.train (head only, on cached
                          frozen-backbone features: the CPU default)
    rescore               scoring.score_solutions, with the cached-feature fast path
                          (training.step_probabilities)
    evaluate              scoring.evaluation on held-out problems never in the pool

Each (strategy, seed) run happens in a transaction that is rolled back, so every run starts
from the same unlabeled pool; callers run the whole thing in a scratch database
(`scratch_database`), so the real pool is never touched.

Only two things are not the production path, both for speed, neither changing a number:
model versions are recorded without hashing the 540 MB backbone each round (nothing is
loaded by hash here), and a trained head scores with the already loaded backbone.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections, transaction

from annotate import corruption, labeling, queueing, synthetic
from annotate.models import Problem, Solution, Step

from . import evaluation, retraining, scoring, selection
from .models import ModelVersion
from .training_data import TrainConfig

if TYPE_CHECKING:
    from . import prm, training

STRATEGIES = ("random", "convincing_wrong", "uncertainty", "mix")
POOLS = ("gsm8k", "math500", "synthetic")
# The curve metrics, as (name, where it lives in a round's metrics); higher is better for all.
METRICS = ("paired_auc", "step_auc", "solution_auc", "processbench_f1", "best_of_n")
TITLES = {"paired_auc": "paired AUC (vs reference step)", "step_auc": "step AUC", "solution_auc": "solution AUC (product)",
          "processbench_f1": "ProcessBench F1", "best_of_n": "best-of-N accuracy (product)",
          "wrong_share": "share of labeled solutions with a wrong answer"}
CALCULATION_NOTE = re.compile(r"<<[^<>]*>>")


# --- the pool -----------------------------------------------------------------------------------


@dataclass
class PoolSolution:
    steps: list[str]
    answer: str
    first_error: int | None  # None: every step is right
    kind: str | None = None


@dataclass
class PoolProblem:
    statement: str
    answer: str
    solutions: list[PoolSolution]  # the correct one first


def gsm8k_problems(path: Path, *, n: int, variants: int, seed: int) -> list[PoolProblem]:
    """GSM8K problems with the reference plus up to `variants` corrupted copies of distinct kinds.

    The calculator notes (`<<48/2=24>>`) are dropped from what the PRM and annotators see:
    model-written solutions do not carry them. A variant whose visible text did not change
    at the corrupted step (the error hid in a note) is discarded.
    """
    lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    random.Random(seed).shuffle(lines)
    rng = random.Random(seed + 1)
    problems = []
    for obj in lines:
        if len(problems) >= n:
            break
        steps, answer = corruption.gsm8k_steps(obj["answer"])
        reference = PoolSolution(visible(steps, answer), answer, None)
        solutions = [reference]
        for kind in rng.sample(corruption.KINDS, k=min(variants, len(corruption.KINDS))):
            bad = corruption.corrupt(steps, answer, rng, question=obj["question"], kind=kind)
            if bad is None:
                continue
            shown = visible(bad.steps, bad.answer)
            if shown[bad.first_error] != reference.steps[bad.first_error]:
                solutions.append(PoolSolution(shown, bad.answer, bad.first_error, bad.kind))
        if len(solutions) > 1:
            problems.append(PoolProblem(obj["question"].strip(), answer, solutions))
    return problems


def math500_problems(path: Path, *, n: int, skip: int, variants: int, seed: int) -> list[PoolProblem]:
    """MATH-500 problems: the reference plus copies whose boxed-answer step states a wrong value."""
    lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    random.Random(seed).shuffle(lines)
    rng = random.Random(seed + 1)
    problems = []
    for obj in lines[skip:]:
        if len(problems) >= n:
            break
        steps, answer = corruption.math_steps(obj["answer"])
        if answer is None:
            continue
        solutions = [PoolSolution([*steps, f"# Answer\n\n{answer}"], answer, None)]
        for kind in rng.sample(corruption.MATH_KINDS, k=min(variants, len(corruption.MATH_KINDS))):
            bad = corruption.corrupt_boxed(steps, rng, kind=kind)
            if bad is not None:
                solutions.append(PoolSolution([*bad.steps, f"# Answer\n\n{bad.answer}"], bad.answer, bad.first_error, kind))
        if len(solutions) > 1:
            problems.append(PoolProblem(obj["question"].strip(), answer, solutions))
    return problems


def visible(steps: Sequence[str], answer: str) -> list[str]:
    return [CALCULATION_NOTE.sub("", step).strip() for step in steps] + [f"# Answer\n\n{answer}"]


def synthetic_problems(*, n: int, variants: int, seed: int) -> list[PoolProblem]:
    """Project-made word problems (annotate.synthetic): no third-party data needed."""
    problems = []
    for p in synthetic.make_pool(n_problems=n, variants_per_problem=variants, seed=seed):
        solutions = [PoolSolution(p.correct.steps, str(p.answer), None)]
        solutions += [PoolSolution(v.steps, str(v.answer), v.first_error, v.corruption) for v in p.variants]
        if len(solutions) > 1:
            problems.append(PoolProblem(p.statement, str(p.answer), solutions))
    return problems


def make_problems(*, pool: str, data: Path | None, n_pool: int, n_heldout: int,
                  seed: int = 0) -> tuple[list[PoolProblem], list[PoolProblem]]:
    """(pool problems, held-out problems). GSM8K: pool from train, held-out from test."""
    if pool == "synthetic":
        problems = distinct(synthetic_problems(n=n_pool + n_heldout, variants=3, seed=seed))
        return problems[:n_pool], problems[n_pool:]
    if pool == "gsm8k":
        if data is None:
            raise ValueError("--data: the folder holding gsm8k/train.jsonl and gsm8k/test.jsonl")
        for name in ("train", "test"):
            if not (data / "gsm8k" / f"{name}.jsonl").exists():
                raise ValueError(f"--data: {data / 'gsm8k' / f'{name}.jsonl'} does not exist")
        pool_problems = distinct(gsm8k_problems(data / "gsm8k" / "train.jsonl", n=n_pool, variants=2, seed=seed))
        held_out = gsm8k_problems(data / "gsm8k" / "test.jsonl", n=n_heldout, variants=3, seed=seed)
        return pool_problems, distinct(held_out, exclude=pool_problems)
    if pool == "math500":
        path = (data or Path("-")) / "math500" / "test.jsonl"
        if not path.exists():
            raise ValueError(f"--data: {path} does not exist")
        # MATH-500 has one split: the first problems (after a seeded shuffle) are the pool, the next held out.
        pool_problems = distinct(math500_problems(path, n=n_pool, skip=0, variants=2, seed=seed))
        # Building the pool skips a few lines (no number to corrupt); distinct() drops any overlap left.
        held_out = math500_problems(path, n=n_heldout, skip=len(pool_problems) + 30, variants=3, seed=seed)
        return pool_problems, distinct(held_out, exclude=pool_problems)
    raise ValueError(f"--pool {pool!r}: expected one of {', '.join(POOLS)}")


def distinct(problems: Sequence[PoolProblem], *, exclude: Sequence[PoolProblem] = ()) -> list[PoolProblem]:
    """Each problem once (and none of `exclude`), each solution once: the pool's content hashes are unique."""
    seen = {p.statement for p in exclude}
    out = []
    for problem in problems:
        if problem.statement in seen:
            continue
        seen.add(problem.statement)
        texts: set[tuple[str, ...]] = set()
        solutions = [s for s in problem.solutions if not (tuple(s.steps) in texts or texts.add(tuple(s.steps)))]
        if len(solutions) > 1:
            out.append(dataclasses.replace(problem, solutions=solutions))
    return out


def write_problems(problems: Sequence[PoolProblem], *, split: str, source: str) -> list[int]:
    """Problems, solutions and steps into the database; returns the solution ids in order."""
    rows = []
    for problem in problems:
        p_hash = Problem.hash_for(problem.statement, problem.answer)
        db_problem = Problem.objects.create(statement=problem.statement, ground_truth_answer=problem.answer,
                                            source=source, split=split, content_hash=p_hash)
        for s in problem.solutions:
            rows.append((s, Solution(
                problem=db_problem, final_answer=s.answer, is_correct=s.first_error is None, source=source,
                generator="reference" if s.first_error is None else f"corrupted:{s.kind}",
                meta={"first_error": s.first_error, "kind": s.kind, "split": split},
                content_hash=Solution.hash_for(p_hash, s.steps),
            )))
    Solution.objects.bulk_create([solution for _, solution in rows], batch_size=1000)
    Step.objects.bulk_create(
        (Step(solution=solution, index=i, text=text) for s, solution in rows for i, text in enumerate(s.steps)),
        batch_size=2000,
    )
    return [solution.pk for _, solution in rows]


def known_ratings(n_steps: int, first_error: int | None) -> list[int]:
    """What the simulated annotator answers: +1 up to the first error, -1 there, then stop."""
    if first_error is None:
        return [1] * n_steps
    return [1] * first_error + [-1]


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

    def probabilities(self, loaded: prm.LoadedPRM, items: Sequence[prm.Item]) -> list[list[prm.StepProbability]]:
        from . import training

        return training.step_probabilities(loaded, items, cache=self.cache, backbone_id=self.backbone_id)


@dataclass
class CachedScorer:
    """What scoring.score_solutions calls `prm`: step probabilities through the feature cache."""

    backbone: Backbone
    loaded: prm.LoadedPRM

    def step_probabilities(self, items):
        return self.backbone.probabilities(self.loaded, items)


def load_backbone(folder: Path, *, cache_dir: Path, layer: int | None = None, dtype=None) -> Backbone:
    from . import training

    loaded = training.load_backbone(folder, dtype=dtype)
    layer = layer if layer is not None else training.default_layer(loaded.model.config.num_hidden_layers)
    return Backbone(loaded, training.FeatureCache(cache_dir), training.backbone_fingerprint(folder), layer)


def record_version(name: str, backbone: Backbone, head: prm.StepHead) -> ModelVersion:
    return ModelVersion.objects.create(name=name, path="(simulation: in memory)", weights_sha256="-",
                                       config={"kind": "head", "head": head.config(backbone.layer)})


def untrained_head(backbone: Backbone, seed: int) -> prm.StepHead:
    """Generation 0: a seeded untrained beta head (its scores only feed the random first pick)."""
    import torch

    from . import prm as prm_module

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
    def items(self) -> list[prm.Item]:
        return [(problem, steps) for _, problem, steps, *_ in self.solutions]


def evaluate_probs(held_out: HeldOut, probs: Sequence[Sequence[float]], sigmas=None) -> dict:
    """The production metrics (scoring.evaluation) plus solution-level AUC, on one set of scores."""
    samples, by_problem = [], {}
    for index, ((problem_id, _, steps, first, is_ref, answer), p) in enumerate(zip(held_out.solutions, probs)):
        labels = [1 if first is None or i < first else 0 if i == first else None for i in range(len(steps))]
        samples.append(evaluation.LabeledSample(problem_id, list(p), labels, -1 if first is None else first))
        if is_ref:  # the reference again, as the pair partner of its problem's corrupted steps
            samples.append(evaluation.LabeledSample(problem_id, list(p), labels, -1, is_reference=True))
        sigma = list(sigmas[index]) if sigmas is not None else None
        by_problem.setdefault(problem_id, []).append(
            evaluation.Candidate(mu=list(p), correct=first is None, answer=answer, sigma=sigma))
    labeled = [s for s in samples if not s.is_reference]
    # Best-of-N breaks ties by position: shuffle (seeded) so the reference is not first on ties.
    candidate_lists = [random.Random(pid).sample(cands, len(cands)) for pid, cands in sorted(by_problem.items())]
    report = evaluation.evaluate(samples, candidate_lists)
    # evaluate() counts each reference twice in step AUC (labeled and as pair partner): recompute on `labeled`.
    report["step_auc"] = evaluation.roc_auc(*evaluation.step_arrays(labeled))
    candidates = [c for cands in by_problem.values() for c in cands]
    report["solution_auc"] = evaluation.roc_auc([evaluation.aggregate(c.mu, "product") for c in candidates],
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


def position_probabilities(pool: Sequence[PoolProblem]) -> dict[int, float]:
    """P(step good | its index) over the pool's known labels: the position-only model."""
    good, seen = Counter(), Counter()
    for problem in pool:
        for s in problem.solutions:
            for i, rating in enumerate(known_ratings(len(s.steps), s.first_error)):
                seen[i] += 1
                good[i] += rating == 1
    return {i: good[i] / seen[i] for i in seen}


ARITHMETIC = re.compile(r"((?:\$?\d[\d,]*(?:\.\d+)?\s*[-+*/x×÷]\s*)+\$?\d[\d,]*(?:\.\d+)?)\s*=\s*\$?(-?\d[\d,]*(?:\.\d+)?)")


def arithmetic_ok(step: str) -> bool:
    """Whether every `a op b = c` written in the step is right (the rule-based baseline)."""
    for match in ARITHMETIC.finditer(step):
        expression = match.group(1).replace("$", "").replace(",", "").replace("x", "*").replace("×", "*").replace("÷", "/")
        try:
            value = eval(expression, {"__builtins__": {}}, {})  # digits and operators only (the regex)
        except (ArithmeticError, SyntaxError):
            continue
        if abs(value - float(match.group(2).replace(",", ""))) > 1e-6 * max(1.0, abs(value)):
            return False
    return True


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
        "mix": selection.parse_shares(settings.STEPWISE_SELECTION_SHARES),  # the production default
    }[strategy]
    return selection.Policy(size=size, shares=shares, seed=seed)


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
    from . import training

    version = record_version(name, ctx.backbone, head)
    scoring.score_solutions(model_version=version, solution_ids=ctx.pool_ids,
                            prm=CachedScorer(ctx.backbone, ctx.backbone.with_head(head)))
    selection.rebuild_queue(model_version=version, policy=policy)
    label_queue(annotator=annotator, limit=policy.size)
    rows = retraining.gather_rows()
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
    wrong = sum(1 for r in rows if any(-1 in ratings for ratings in r.ratings))
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
    items = scoring.read_items(pool_ids)[2] + evaluation_set.items
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


def describe(problems: Sequence[PoolProblem]) -> dict:
    wrong = [s for p in problems for s in p.solutions if s.first_error is not None]
    kinds = Counter(s.kind for s in wrong)
    subtle = sum(n for kind, n in kinds.items() if kind in corruption.SUBTLE_KINDS)
    return {"problems": len(problems), "solutions": sum(len(p.solutions) for p in problems),
            "wrong_answer_solutions": len(wrong), "kinds": dict(kinds),
            "subtle_share": subtle / len(wrong) if wrong else None}


# --- curves, spread and efficiency ----------------------------------------------------------------


def _mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    xs = [v for v in values if v is not None]
    if not xs:
        return None, None
    mean = sum(xs) / len(xs)
    return mean, (math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0)


def summarize(runs: list[list[dict]]) -> dict:
    """Per metric: mean and sample std over seeds at each label count, plus the per-seed values."""
    labels = [point["labels"] for point in runs[0]]
    out: dict = {"labels": labels, "seeds": len(runs)}
    for metric in (*METRICS, "ece", "wrong_share", "labeled_steps"):
        per_seed = [[point[metric] for point in run] for run in runs]
        stats = [_mean_std([seed[i] for seed in per_seed]) for i in range(len(labels))]
        out[metric] = {"mean": [m for m, _ in stats], "std": [s for _, s in stats], "per_seed": per_seed}
    return out


def labels_to_reach(labels: Sequence[int], values: Sequence[float | None], level: float) -> float | None:
    """Labels at which the curve's running maximum first reaches `level` (linear in between)."""
    best, previous = -math.inf, None
    for n, value in zip(labels, values):
        value = -math.inf if value is None else value
        if max(best, value) >= level:
            if previous is None or best == -math.inf:
                return float(n)
            x0, y0 = previous
            return x0 + (n - x0) * (level - y0) / (value - y0) if value > y0 else float(n)
        best = max(best, value)
        previous = (n, best)
    return None


def efficiency(curves: dict[str, list[list[dict]]], *, resamples: int = 500, seed: int = 0) -> dict:
    """Labels random needs to reach a quality level / labels the strategy needs, per metric.

    On the curves averaged over seeds (one seed's curve is too noisy to cross a level
    cleanly). The levels are random's quality at each label count after the shared first
    pick; the ratios at the levels are combined by geometric mean. A level the strategy
    never reaches counts as reached at the last label count, which makes its ratio an upper
    bound (`unreached` says how many). The spread comes from resampling seeds (paired:
    random and the strategy share each seed's first pick): std and 5-95 % interval.
    """
    labels = [point["labels"] for point in curves["random"][0]]
    n_seeds = len(curves["random"])
    rng = random.Random(seed)
    draws = [[rng.randrange(n_seeds) for _ in range(n_seeds)] for _ in range(resamples)] if n_seeds > 1 else []
    out: dict = {}
    for strategy, runs in curves.items():
        out[strategy] = {}
        for metric in METRICS:
            point = _ratio(labels, curves["random"], runs, metric, range(n_seeds))
            spread = [r["ratio"] for d in draws if (r := _ratio(labels, curves["random"], runs, metric, d))["ratio"]]
            spread.sort()
            out[strategy][metric] = point | {
                "std": _mean_std(spread)[1] if spread else 0.0,
                "interval_90": [spread[int(0.05 * (len(spread) - 1))], spread[int(0.95 * (len(spread) - 1))]] if spread else None,
            }
    return out


def _ratio(labels: Sequence[int], random_runs, runs, metric: str, seeds) -> dict:
    seeds = list(seeds)

    def mean_curve(source):
        return [_mean_std([source[k][i][metric] for k in seeds])[0] for i in range(len(labels))]

    random_curve, curve = mean_curve(random_runs), mean_curve(runs)
    levels, ratios, unreached, best = [], [], 0, -math.inf
    for value in random_curve[1:]:
        best = max(best, -math.inf if value is None else value)
        if best == -math.inf:
            continue
        need_random = labels_to_reach(labels, random_curve, best)
        need = labels_to_reach(labels, curve, best)
        if need is None:
            unreached, need = unreached + 1, float(labels[-1])
        levels.append(best)
        ratios.append(need_random / need)
    ratio = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
    return {"ratio": ratio, "levels": levels, "per_level": ratios, "unreached": unreached}


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


def plot(result: dict, path: Path) -> Path:
    """Learning curves (mean and +-1 std over seeds) with the baselines, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (*METRICS, "wrong_share")
    fig, grid = plt.subplots(2, 3, figsize=(13, 7.5))
    axes = grid.ravel()
    for ax, metric in zip(axes, panels):
        for strategy, summary in result["strategies"].items():
            mean, std = summary[metric]["mean"], summary[metric]["std"]
            xs = [x for x, m in zip(summary["labels"], mean) if m is not None]
            ms = [m for m in mean if m is not None]
            ss = [s or 0.0 for m, s in zip(mean, std) if m is not None]
            ax.plot(xs, ms, marker="o", markersize=3, label=strategy)
            ax.fill_between(xs, [m - s for m, s in zip(ms, ss)], [m + s for m, s in zip(ms, ss)], alpha=0.15)
        for (name, values), style in zip(result["baselines"].items(), (":", "--")):
            if metric in METRICS and values.get(metric) is not None:
                ax.axhline(values[metric], color="grey", linestyle=style, label=name.replace("_", "-"))
        ax.set_title(TITLES.get(metric, metric), fontsize=10)
        ax.set_xlabel("labeled solutions")
    axes[0].legend(fontsize=7)
    run = result["settings"]
    fig.suptitle(f"{run.get('pool', 'pool')}: {result['pool']['solutions']} solutions, held-out "
                 f"{result['held_out']['solutions']}; mean ± std over {len(run['seeds'])} seeds; "
                 f"backbone {Path(str(run.get('backbone', '?'))).name}, layer {run['layer']}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def stderr_log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
