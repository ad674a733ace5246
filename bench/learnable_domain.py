"""Active learning where the scorer can learn the task: generated arithmetic chains, a small MLP.

The frozen-backbone benchmark (`bench.simulation_scale`) reads a linear head over SmolLM2's
features, which saturates early; no selection policy can beat random when the scorer has
nothing left to learn. This domain is the opposite regime. A problem is a chain of 3-6
additions and subtractions ("Start at 47. add 5, then subtract 8, ..."), each step written
`a op b = c`; a
wrong variant has one step whose `c` is off (an error kind from `ERROR_KINDS`) and the later
steps computed faithfully from the wrong value, so only the first error is locally wrong (the
PRM800K labeling rule marks it, `simulation_pool.known_ratings`). Pure Python, seeded.

The scorer is an MLP trained from scratch on features read from each step's text (digits and
magnitudes of a, b, c and the operator): learning the units table of `+` and `-`, the carries
and the magnitudes takes a few thousand labeled solutions (random labels: step AUC 0.66 at
200, 0.89 at 1,000, 0.95 at 2,000), so labels keep paying well past where the frozen head stops.
A wrong operation may write `a + b` with the product or the difference as its result.
A rule checker (`simulation_pool.arithmetic_ok`) is perfect here: it is the ceiling.

Selection calls the product's own `selection.select` on `selection.Candidate` rows. The
rollout label of a step (Math-Shepherd's soft label), for the rollout-vs-PRM policy, is drawn
from the known correctness of its prefix: `ROLLOUTS` continuations each reach the right
answer with probability `SOLVE_FROM_RIGHT` after a right prefix and `SOLVE_FROM_WRONG` after a
wrong one (the stand-in generator of `bench.simulation_rollouts` behaves so; drawing the
counts directly keeps a 7,500-solution pool's labels to a second).
"""
from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from bench.simulation import HeldOut, curve_point, evaluate_probs
from bench.simulation_pool import PoolProblem, PoolSolution, known_ratings
from scoring.core.training_data import stratum_weights
from scoring.rescoring import ensemble, selection
from scoring.rescoring.selection import rollout_disagreement

OPERATORS = {"+": "add", "-": "subtract", "×": "multiply by"}
ERROR_KINDS = ("off_by_one", "digit_swap", "tens_slip", "wrong_operation")
STEP = re.compile(r"^(-?\d+) ([+\-×]) (\d+) = (-?\d+)$")
ROLLOUTS = 4
SOLVE_FROM_RIGHT = 0.7
SOLVE_FROM_WRONG = 0.03
# Policies: the product's reasons by their shares. In the ROLLOUT_POLICIES the `disagreement`
# share ranks by how far the rollout labels are from the PRM (`rollout_disagreement`), which is
# not a product reason yet.
POLICIES: dict[str, dict[str, float]] = {
    "random": {"random": 1.0},
    "convincing_wrong": {"convincing_wrong": 1.0},
    "default_mix": {"convincing_wrong": 0.5, "random": 0.5},
    "disagreement": {"disagreement": 1.0},
    "first_error_disagreement": {"first_error_disagreement": 1.0},
    "rollout_disagreement": {"disagreement": 1.0},
    "rollout_random": {"disagreement": 0.5, "random": 0.5},
    "convincing_wrong_rollout_random": {"convincing_wrong": 0.34, "disagreement": 0.33, "random": 0.33},
}
ROLLOUT_POLICIES = {"rollout_disagreement", "rollout_random", "convincing_wrong_rollout_random"}


# --- the domain ------------------------------------------------------------------------------------


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _chain(rng: random.Random) -> tuple[int, list[tuple[str, int]]]:
    value = rng.randint(10, 60)
    start, ops = value, []
    for _ in range(rng.randint(3, 6)):
        choices = ["+"] + (["-"] if value >= 30 else [])
        op, b = rng.choice(choices), rng.randint(2, 9)
        ops.append((op, b))
        value = _apply(value, op, b)
    return start, ops


def _wrong_result(a: int, op: str, b: int, kind: str, rng: random.Random) -> int | None:
    right = _apply(a, op, b)
    if kind == "off_by_one":
        return right + rng.choice((-1, 1))
    if kind == "tens_slip":
        return right + rng.choice((-10, 10))
    if kind == "digit_swap":
        digits = list(str(right))
        if len(digits) < 2:
            return None
        i = rng.randrange(len(digits) - 1)
        digits[i], digits[i + 1] = digits[i + 1], digits[i]
        return int("".join(digits)) if digits[0] != "0" else None
    other = rng.choice([o for o in OPERATORS if o != op])  # wrong_operation: the text keeps `op`
    return _apply(a, other, b)


def _steps(start: int, ops: Sequence[tuple[str, int]], error: tuple[int, int] | None = None) -> list[str] | None:
    """The chain's step texts; `error` = (step, wrong c) makes that step wrong and carries it on."""
    value, steps = start, []
    for index, (op, b) in enumerate(ops):
        result = error[1] if error and error[0] == index else _apply(value, op, b)
        if result < 0:
            return None
        steps.append(f"{value} {op} {b} = {result}")
        value = result
    return steps


def make_problem(rng: random.Random, *, variants: int) -> PoolProblem:
    """A chain with its right solution first and up to `variants` wrong ones of distinct kinds."""
    start, ops = _chain(rng)
    right = _steps(start, ops) or []
    statement = f"Start at {start}. " + ", then ".join(f"{OPERATORS[op]} {b}" for op, b in ops) + "."
    solutions = [PoolSolution(right, right[-1].split(" = ")[1], None)]
    for kind in rng.sample(ERROR_KINDS, len(ERROR_KINDS)):
        if len(solutions) > variants:
            break
        at = rng.randrange(len(ops))
        a = int(right[at].split(" ")[0])
        wrong = _wrong_result(a, ops[at][0], ops[at][1], kind, rng)
        steps = _steps(start, ops, (at, wrong)) if wrong is not None and wrong != _apply(a, *ops[at]) else None
        if steps and steps[-1] != right[-1]:
            solutions.append(PoolSolution(steps, steps[-1].split(" = ")[1], at, kind))
    return PoolProblem(statement, solutions[0].answer, solutions)


def make_problems(n: int, *, variants: int, seed: int) -> list[PoolProblem]:
    rng = random.Random(seed)
    return [make_problem(rng, variants=variants) for _ in range(n)]


# --- what the scorer reads ---------------------------------------------------------------------------

N_FEATURES = 3 * 20 + len(OPERATORS) + 3 + 1


def step_features(step: str, index: int) -> list[float]:
    """Units and tens digits of a, b, c (one-hot), the operator, magnitudes and position."""
    match = STEP.match(step)
    if match is None:
        raise ValueError(f"step {step!r} is not 'a op b = c'")
    a, op, b, c = int(match[1]), match[2], int(match[3]), int(match[4])
    out = [0.0] * N_FEATURES
    for slot, number in enumerate((a, b, c)):
        out[slot * 20 + number % 10] = 1.0
        out[slot * 20 + 10 + (number // 10) % 10] = 1.0
    out[60 + list(OPERATORS).index(op)] = 1.0
    out[63:66] = [math.log10(1 + a) / 3, math.log10(1 + b) / 3, math.log10(1 + c) / 3]
    out[66] = index / 6
    return out


@dataclass
class Solutions:
    """A flat set of solutions with their steps' features, in one tensor."""

    problem_ids: list[int]
    steps: list[list[str]]
    first_error: list[int | None]
    x: torch.Tensor = field(repr=False)
    offsets: list[int] = field(repr=False)

    @classmethod
    def of(cls, problems: Sequence[PoolProblem]) -> Solutions:
        rows = [(pid, s) for pid, p in enumerate(problems) for s in p.solutions]
        feats = [step_features(step, i) for _, s in rows for i, step in enumerate(s.steps)]
        offsets = [0]
        for _, s in rows:
            offsets.append(offsets[-1] + len(s.steps))
        return cls([pid for pid, _ in rows], [s.steps for _, s in rows], [s.first_error for _, s in rows],
                   torch.tensor(feats), offsets)

    def __len__(self) -> int:
        return len(self.steps)

    def split(self, values: torch.Tensor) -> list[torch.Tensor]:
        return [values[..., a:b] for a, b in zip(self.offsets, self.offsets[1:])]


# --- the scorer ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScorerConfig:
    hidden: int = 64
    steps: int = 200  # full-batch Adam steps: seconds on ≤ 10k rows, one thread
    lr: float = 1e-2
    weight_decay: float = 1e-4


def training_set(data: Solutions, chosen: Sequence[int], *, weights: Sequence[float] | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows, targets and weights of the steps the simulated annotator labeled in `chosen`."""
    rows: list[int] = []
    targets: list[float] = []
    ws: list[float] = []
    for i, w in zip(chosen, weights or [1.0] * len(chosen)):
        ratings = known_ratings(len(data.steps[i]), data.first_error[i])
        rows.extend(range(data.offsets[i], data.offsets[i] + len(ratings)))
        targets.extend(1.0 if r > 0 else 0.0 for r in ratings)
        ws.extend([w] * len(ratings))
    return data.x[rows], torch.tensor(targets), torch.tensor(ws)


def fit(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, *, seed: int,
        config: ScorerConfig = ScorerConfig()) -> torch.nn.Module:
    """An MLP from scratch: P(step right) from its features, weighted cross-entropy."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], config.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(config.hidden, config.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(config.hidden, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    loss_fn = torch.nn.BCEWithLogitsLoss(weight=w / w.mean())
    for _ in range(config.steps):
        optimizer.zero_grad()
        loss_fn(model(x).squeeze(-1), y).backward()
        optimizer.step()
    return model.eval()


def probabilities(model: torch.nn.Module, data: Solutions) -> torch.Tensor:
    with torch.no_grad():
        return torch.sigmoid(model(data.x).squeeze(-1))


def train_scorer(problems: Sequence[PoolProblem], *, labels: int, seed: int) -> tuple[torch.nn.Module, Solutions]:
    """A scorer trained on `labels` random solutions of `problems` (what the assistance benchmark shows)."""
    data = Solutions.of(problems)
    chosen = random.Random(seed).sample(range(len(data)), min(labels, len(data)))
    x, y, w = training_set(data, chosen)
    return fit(x, y, w, seed=seed), data


# --- rollout labels --------------------------------------------------------------------------------------


def rollout_labels(first_error: int | None, n_steps: int, rng: random.Random) -> list[float]:
    """Math-Shepherd's soft label per step: the share of `ROLLOUTS` continuations reaching the answer."""
    out = []
    for i in range(n_steps):
        p = SOLVE_FROM_RIGHT if first_error is None or i < first_error else SOLVE_FROM_WRONG
        out.append(sum(rng.random() < p for _ in range(ROLLOUTS)) / ROLLOUTS)
    return out


# The rule is the product's own (`selection.rollout_disagreement`), imported above.


# --- the loop ------------------------------------------------------------------------------------------


@dataclass
class Settings:
    budgets: list[int]
    policies: list[str]
    seeds: list[int]
    members: int = 3
    per_problem: int = 2
    scorer: ScorerConfig = ScorerConfig()


@dataclass
class Round:
    model: torch.nn.Module
    members: list[torch.nn.Module]


def train_round(data: Solutions, chosen: Sequence[int], strata: dict, *, members: int, seed: int,
                config: ScorerConfig) -> Round:
    """The scorer on the labels so far (importance-weighted to the pool's right/wrong mix, as
    retraining does), and `members` more on problem bootstraps for the ensemble reasons."""
    weights = stratum_weights([data.first_error[i] is None for i in chosen], strata)
    x, y, w = training_set(data, chosen, weights=weights)
    model = fit(x, y, w, seed=seed, config=config)
    rng, ensemble_members = random.Random(seed), []
    for m in range(members):
        problems = sorted({data.problem_ids[i] for i in chosen})
        counts: dict[int, int] = {}
        for p in (rng.choice(problems) for _ in problems):
            counts[p] = counts.get(p, 0) + 1
        resampled = [i for i in chosen for _ in range(counts.get(data.problem_ids[i], 0))]
        xb, yb, wb = training_set(data, resampled, weights=stratum_weights(
            [data.first_error[i] is None for i in resampled], strata))
        ensemble_members.append(fit(xb, yb, wb, seed=seed * 100 + m + 1, config=config))
    return Round(model, ensemble_members)


def candidates(data: Solutions, fitted: Round, labeled: set[int], *, rollouts: list[list[float]] | None,
               ) -> list[selection.Candidate]:
    per_solution = data.split(probabilities(fitted.model, data))
    member_probs = data.split(torch.stack([probabilities(m, data) for m in fitted.members])) if fitted.members else None
    out = []
    for i in range(len(data)):
        if i in labeled:
            continue
        p = per_solution[i]
        c = selection.Candidate(i, data.problem_ids[i], data.first_error[i] is None,
                                float(p.clamp_min(1e-12).log().sum().exp()), None)
        if member_probs is not None:
            u = ensemble.solution_uncertainty(member_probs[i])
            c.spread, c.first_error_disagreement, c.upper_score = u.spread, u.first_error_disagreement, u.upper_score
        if rollouts is not None:
            # Ranked as the disagreement reason ranks (largest number first, cap per problem).
            c.spread = rollout_disagreement(rollouts[i], p.tolist())
        out.append(c)
    return out


def measure(held_out: HeldOut, held: Solutions, fitted: Round, data: Solutions, chosen: Sequence[int]) -> dict:
    probs = [v.tolist() for v in held.split(probabilities(fitted.model, held))]
    wrong = sum(data.first_error[i] is not None for i in chosen)
    return curve_point(evaluate_probs(held_out, probs, best_of_n=False)) | {
        "labels": len(chosen), "wrong_share": wrong / len(chosen),
        "labeled_steps": sum(len(known_ratings(len(data.steps[i]), data.first_error[i])) for i in chosen)}


def run_seed(pool: Sequence[PoolProblem], held_out_problems: Sequence[PoolProblem], settings: Settings, *,
             seed: int, log: Callable[[str], None] = lambda _: None) -> dict[str, list[dict]]:
    """One learning curve per policy; all continue from the same random first pick."""
    data, held = Solutions.of(pool), Solutions.of(held_out_problems)
    held_out = HeldOut.from_problems(held_out_problems)
    strata = {True: sum(f is None for f in data.first_error), False: sum(f is not None for f in data.first_error)}
    rng = random.Random(seed)
    rollouts = [rollout_labels(f, len(s), rng) for f, s in zip(data.first_error, data.steps)]
    first = random.Random(seed).sample(range(len(data)), settings.budgets[0])
    starts: dict[int, tuple[Round, dict]] = {}  # the shared first pick, fitted once per ensemble size
    curves = {}
    for policy_name in settings.policies:
        shares = POLICIES[policy_name]
        uses_ensemble = bool(selection.ENSEMBLE_REASONS & set(shares)) and policy_name not in ROLLOUT_POLICIES
        members = settings.members if uses_ensemble else 0
        chosen = list(first)
        if members not in starts:
            fitted = train_round(data, chosen, strata, members=members, seed=seed, config=settings.scorer)
            starts[members] = fitted, measure(held_out, held, fitted, data, chosen)
        fitted, start = starts[members]
        points = [start]
        for round_number, budget in enumerate(settings.budgets[1:], start=1):
            policy = selection.Policy(size=budget - len(chosen), shares=shares, per_problem=settings.per_problem,
                                      seed=seed * 1000 + round_number)
            pool_rows = candidates(data, fitted, set(chosen),
                                   rollouts=rollouts if policy_name in ROLLOUT_POLICIES else None)
            chosen += [pick.candidate.solution_id for pick in selection.select(pool_rows, policy)]
            fitted = train_round(data, chosen, strata, members=members, seed=seed, config=settings.scorer)
            points.append(measure(held_out, held, fitted, data, chosen))
        curves[policy_name] = points
        log(f"seed {seed} {policy_name}: step AUC {points[0]['step_auc']:.3f} -> {points[-1]['step_auc']:.3f}, "
            f"first-error F1 {points[-1]['processbench_f1']:.3f} at {points[-1]['labels']} labels")
    return curves
