"""What a PRM learns from each label source: people, rollouts, a judge, and their consensus.

Qwen's PRM study (arXiv 2501.07301) trained its best PRM on consensus-filtered labels: a step
keeps its label only where Monte-Carlo rollouts and an LLM judge agree. This benchmark asks the
same question where the answer can be measured: the learnable domain (`bench.learnable_domain`:
arithmetic chains whose first error is known, the domain's MLP trained from scratch). Every arm
trains on the same random solutions (the budget) and is scored on the same held-out set.

The sources, drawn per solution with known error rates:

- **human**: the known ratings (PRM800K's rule: +1 up to the first error, -1 there, then stop).
- **human, noisy**: a blind labeler (`simulation_assistance.label`) who misses the first error
  with probability `miss` and calls a right step wrong with probability `false_alarm`. PRM800K's
  maintainers report about 80 % agreement with gold for their labelers (prm800k#12); the
  default (0.25, 0.03) lands near that.
- **rollouts**: Math-Shepherd's K of `ROLLOUTS` per step, drawn as the learnable domain draws
  them (`learnable_domain.rollout_labels`), trained on as K of N, as training counts them.
- **judge**: a verifier reading the steps in order, which gives each step's known verdict but
  misses an error with probability `miss` and flags a right step with probability
  `false_alarm`, and stops at its first "incorrect", as a ThinkPRM verifier does. It is the noisy
  labeler's model with the judge's rates: after a missed error the later steps are locally right,
  so it calls them good. One vote a step, as `--labels judge` trains.
- **rollouts, hard**: one vote a step, Math-Shepherd's hard label (some continuation reached the
  answer: `AutoStepLabel.hard`), the verdict consensus compares; it tells a soft label's
  calibration apart from the label's noise.
- **rollouts + judge, pooled**: K of N with the judge's vote added where it spoke (how training
  adds up the counts of several sources).
- **consensus**: one vote where the rollouts' and the judge's verdicts agree, by the product's own
  rule (`annotate.labeling.sources.consensus` over `label_rows.CONSENSUS_SOURCES`, each word's
  verdict by `AutoStepLabel.hard`); steps where they differ or the judge was silent keep no label.

A label's accuracy is read on the steps up to and including the first error, where every
definition of a step's truth agrees and where step AUC is measured; labels after the first error
are counted apart: rollouts mark those locally right steps bad, which this scorer (it reads one
step's arithmetic) can only learn as noise.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch

from annotate.labeling import sources
from annotate.models import AutoStepLabel
from bench import learnable_domain, simulation_assistance
from bench.simulation import HeldOut, evaluate_probs
from bench.simulation_assistance import Annotator, GoldTask
from bench.simulation_pool import PoolProblem, known_ratings
from scoring.rescoring.label_rows import CONSENSUS_SOURCES

ARMS = ("human", "human_noisy", "rollouts", "rollouts_hard", "pooled", "judge", "consensus")
TITLES = {"human": "human (gold)", "human_noisy": "human, noisy labelers", "rollouts": "rollouts, K of N",
          "rollouts_hard": "rollouts, hard (K > 0)",
          "pooled": "rollouts + judge, pooled", "judge": "judge", "consensus": "consensus (rollouts = judge)"}


@dataclass(frozen=True)
class Rates:
    """A labeler's or a judge's error rates per step (stated, not measured on a model)."""

    miss: float
    false_alarm: float

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not 0 <= value <= 1:
                raise ValueError(f"{name}={value}: a probability in [0, 1]")

    def first_error(self, first_error: int | None, n_steps: int, rng: random.Random) -> int | None:
        """The first step this reader calls wrong, reading in order (the blind annotator's rule)."""
        person = Annotator(miss=self.miss, false_alarm=self.false_alarm)
        task = GoldTask(first_error, [0.5] * n_steps)  # blind: the scores are never read
        return simulation_assistance.label(task, "blind", person, margin=0.5, rng=rng).first_error


@dataclass(frozen=True)
class Settings:
    budgets: list[int]
    seeds: list[int]
    judge: Rates = Rates(miss=0.25, false_alarm=0.05)
    labelers: Rates = Rates(miss=0.25, false_alarm=0.03)
    scorer: learnable_domain.ScorerConfig = learnable_domain.ScorerConfig()
    resamples: int = 2000


# A labeled step: (index, target P(good), weight). Weight is N for counts, 1 for a vote.
Labels = list[tuple[int, float, float]]


@dataclass
class Drawn:
    """One solution's word from every source, drawn once per seed."""

    n_steps: int
    first_error: int | None
    rollouts_k: list[int]
    judge_first_error: int | None
    labeler_first_error: int | None


def draw(first_error: int | None, n_steps: int, settings: Settings, rng: random.Random) -> Drawn:
    soft = learnable_domain.rollout_labels(first_error, n_steps, rng)
    return Drawn(n_steps, first_error, [round(p * learnable_domain.ROLLOUTS) for p in soft],
                 settings.judge.first_error(first_error, n_steps, rng),
                 settings.labelers.first_error(first_error, n_steps, rng))


def votes(first_error: int | None, n_steps: int) -> Labels:
    """One vote a step, read in order up to a named first error: PRM800K's rule."""
    return [(i, 1.0 if rating > 0 else 0.0, 1.0) for i, rating in enumerate(known_ratings(n_steps, first_error))]


def rollout_counts(drawn: Drawn) -> Labels:
    n = learnable_domain.ROLLOUTS
    return [(i, k / n, float(n)) for i, k in enumerate(drawn.rollouts_k)]


def rollout_word(k: int) -> sources.RolloutWord:
    """The product's word for K of N rollouts, its verdict by the product's hard rule."""
    n = learnable_domain.ROLLOUTS
    return sources.RolloutWord(soft=k / n, n_correct=k, n_rollouts=n,
                               good=AutoStepLabel(soft=k / n, n_correct=k, n_rollouts=n).hard)


def rollout_verdicts(drawn: Drawn) -> Labels:
    return [(i, float(rollout_word(k).good), 1.0) for i, k in enumerate(drawn.rollouts_k)]


def pooled(drawn: Drawn) -> Labels:
    """K of N with the judge's vote added where it spoke, as training adds the counts of sources."""
    judge = {i: target for i, target, _ in votes(drawn.judge_first_error, drawn.n_steps)}
    n = learnable_domain.ROLLOUTS
    out = []
    for i, k in enumerate(drawn.rollouts_k):
        said = i in judge
        out.append((i, (k + judge.get(i, 0.0)) / (n + said), float(n + said)))
    return out


def consensus(drawn: Drawn) -> Labels:
    """One vote where the rollouts and the judge agree, by the product's rule on the product's words."""
    out = []
    for i, judged, _ in votes(drawn.judge_first_error, drawn.n_steps):  # the judge is silent after it stops
        step = sources.StepSources(
            index=i, text="", rollout=rollout_word(drawn.rollouts_k[i]),
            judge=sources.JudgeWord(soft=judged, critique="", good=AutoStepLabel(soft=judged).hard))
        agreed = sources.consensus(step, CONSENSUS_SOURCES)
        if agreed is not None:
            out.append((i, float(agreed), 1.0))
    return out


LABELERS: dict[str, Callable[[Drawn], Labels]] = {
    "human": lambda d: votes(d.first_error, d.n_steps),
    "human_noisy": lambda d: votes(d.labeler_first_error, d.n_steps),
    "rollouts": rollout_counts,
    "rollouts_hard": rollout_verdicts,
    "pooled": pooled,
    "judge": lambda d: votes(d.judge_first_error, d.n_steps),
    "consensus": consensus,
}


# --- training and measuring -----------------------------------------------------------------------


def label_quality(drawn: Sequence[Drawn], labels: Sequence[Labels]) -> dict:
    """Labeled steps per solution; agreement with the truth up to the first error (1 - |target - truth|,
    a vote's accuracy); the share of labels placed after the first error; and how often the labels'
    first error (their first step below one half) is the known one (PRM800K's gold measure)."""
    scored, agreement, beyond, same_first_error = 0, 0.0, 0, 0
    for d, solution_labels in zip(drawn, labels):
        named = next((i for i, target, _ in solution_labels if target < 0.5), None)
        same_first_error += named == d.first_error
        for i, target, _ in solution_labels:
            if d.first_error is not None and i > d.first_error:
                beyond += 1
                continue
            truth = 1.0 if d.first_error is None or i < d.first_error else 0.0
            scored += 1
            agreement += 1 - abs(target - truth)
    total = sum(len(s) for s in labels)
    return {"steps_per_solution": total / len(labels), "accuracy": agreement / scored if scored else None,
            "beyond_first_error": beyond / total if total else None,
            "first_error_agreement": same_first_error / len(labels)}


def train(data: learnable_domain.Solutions, chosen: Sequence[int], labels: Sequence[Labels], *, seed: int,
          config: learnable_domain.ScorerConfig) -> torch.nn.Module:
    """The learnable domain's own scorer (`learnable_domain.fit`) on these solutions' labeled steps."""
    rows = [data.offsets[i] + step for i, solution_labels in zip(chosen, labels) for step, _, _ in solution_labels]
    y = torch.tensor([target for solution_labels in labels for _, target, _ in solution_labels])
    w = torch.tensor([weight for solution_labels in labels for _, _, weight in solution_labels])
    return learnable_domain.fit(data.x[rows], y, w, seed=seed, config=config)


def evaluate(model: torch.nn.Module, held: learnable_domain.Solutions, held_out: HeldOut) -> dict:
    probs = [p.tolist() for p in held.split(learnable_domain.probabilities(model, held))]
    report = evaluate_probs(held_out, probs, best_of_n=False)
    return {"step_auc": report["step_auc"], "processbench_f1": report["processbench"]["f1"]}


def run_seed(pool: Sequence[PoolProblem], held_problems: Sequence[PoolProblem], settings: Settings, *,
             seed: int, log: Callable[[str], None] = lambda _: None) -> dict[int, dict[str, dict]]:
    """budget -> arm -> label quality and held-out quality, every arm on the same solutions."""
    data, held = learnable_domain.Solutions.of(pool), learnable_domain.Solutions.of(held_problems)
    held_out = HeldOut.from_problems(held_problems)
    rng = random.Random(seed)
    drawn = [draw(f, len(steps), settings, rng) for f, steps in zip(data.first_error, data.steps)]
    order = random.Random(seed + 10_000).sample(range(len(data)), len(data))
    out: dict[int, dict[str, dict]] = {}
    for budget in settings.budgets:
        chosen = order[:budget]  # nested budgets: a larger one adds solutions to the smaller's
        out[budget] = {}
        for arm in ARMS:
            labels = [LABELERS[arm](drawn[i]) for i in chosen]
            model = train(data, chosen, labels, seed=seed, config=settings.scorer)
            out[budget][arm] = label_quality([drawn[i] for i in chosen], labels) | evaluate(model, held, held_out)
            # Of all the steps of the chosen solutions: how many labels the arm trains on.
            out[budget][arm]["step_share"] = sum(map(len, labels)) / sum(drawn[i].n_steps for i in chosen)
        log(f"seed {seed}, {budget} solutions: step AUC " + ", ".join(
            f"{arm} {out[budget][arm]['step_auc']:.3f}" for arm in ARMS))
    return out


# --- over seeds --------------------------------------------------------------------------------------


def mean_interval(values: Sequence[float], *, resamples: int, seed: int = 0) -> dict:
    """Mean over seeds and its 95 % percentile bootstrap interval (seeds resampled with replacement)."""
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=len(values))) / len(values) for _ in range(resamples))
    return {"mean": sum(values) / len(values), "interval_95": [means[int(0.025 * (resamples - 1))],
                                                                means[int(0.975 * (resamples - 1))]],
            "per_seed": list(values)}


def summarize(per_seed: Sequence[dict[int, dict[str, dict]]], settings: Settings) -> dict:
    """budget -> arm -> each figure's mean over seeds; step AUC with its interval, and the gain of
    consensus over each other arm, paired by seed."""
    out: dict = {}
    for budget in settings.budgets:
        arms: dict[str, dict[str, object]] = {}
        for arm in ARMS:
            rows = [seed_result[budget][arm] for seed_result in per_seed]
            arms[arm] = {key: _mean([row[key] for row in rows]) for key in rows[0] if key != "step_auc"}
            arms[arm]["step_auc"] = mean_interval([row["step_auc"] for row in rows], resamples=settings.resamples)
        for arm in ARMS:
            if arm != "consensus":
                gains = [r[budget]["consensus"]["step_auc"] - r[budget][arm]["step_auc"] for r in per_seed]
                arms["consensus"][f"gain_over_{arm}"] = mean_interval(gains, resamples=settings.resamples)
        out[budget] = arms
    return out


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None

