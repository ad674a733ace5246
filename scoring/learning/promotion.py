"""The promotion gate: a trained version is measured next to the current one on the same
held-out data, and becomes current only if the evidence says it is better on the run's metric.

Held out means problems the new model never saw: the labeled validation problems of the
split (by problem, stable as data grows) plus pool problems the split would hold out,
with their reference solutions (paired AUC) and graded candidates (best-of-N). The
metrics themselves are plain functions in `scoring.core.evaluation`.

Everything is the run's project's: its labels and pool, its current model, its thresholds.

Evidence: the gain in the gate metric over the project's current model, with a paired bootstrap
interval over the held-out solutions (`evaluation.paired_bootstrap`). A version is promoted only
when the interval's lower bound is above the project's `promotion_min_gain` and the held-out set
has at least its `promotion_min_solutions` labeled solutions and `promotion_min_steps` labeled
steps (LabelingConfig); a smaller set ends "not enough evidence" (two solutions once "proved"
1.00 vs 0.50), an interval that does not clear the bar ends "rejected".

What can be decided first is: the counts need no model. When they are short of the rule, both
models are measured on the held-out labeled solutions alone (for the values shown beside the
decision), never on the references and best-of-N candidates, whose scoring takes minutes and
could not change the outcome.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import transaction

from annotate.models import LabelingConfig, Project, Solution
from scoring.core import evaluation
from scoring.core.model_files import backbone_folder, read_model_config
from scoring.core.training_data import Example, TrainConfig, build_examples, is_validation_problem, split_by_problem
from scoring.learning.options import RunOptions
from scoring.models import ModelVersion, TrainingRun
from scoring.rescoring import label_rows
from scoring.rescoring import rescore as scoring
from scoring.store import registry
from scoring.store.remote_scorer import RemotePRM
from steps.arithmetic import first_error

if TYPE_CHECKING:
    from scoring.core import prm


@dataclass
class EvalSet:
    """The held-out data both models are measured on: same problems, same solutions."""

    labeled: list[Example]  # labeled solutions of held-out problems
    references: list[tuple[int, str, list[str]]]  # (problem id, problem, steps)
    bon: list[list[tuple[Solution, list[str]]]]  # per problem: graded candidates


def eval_set(
    *,
    project: Project,
    examples: list[Example],
    trained_on: set[int],
    val_fraction: float,
    seed: int,
    max_problems: int,
    max_candidates: int,
) -> EvalSet:
    """Held-out labeled solutions plus, on held-out problems of the project, references and graded
    candidates.

    Held out: the labeled validation problems and any pool problem the split would hold
    out, never a problem the new model was trained on.
    """
    problems = {e.row.problem_id for e in examples}
    pool = (Solution.objects.with_steps().filter(project=project, is_gold=False)
            .select_related("problem").order_by("pk"))
    by_problem: dict[int, list[Solution]] = defaultdict(list)
    references = []
    for solution in pool.iterator(chunk_size=2000):
        held_out = solution.problem_id in problems or is_validation_problem(
            solution.problem_id, val_fraction=val_fraction, seed=seed
        )
        if not held_out or solution.problem_id in trained_on:
            continue
        if solution.is_reference:
            references.append(solution)
        elif solution.is_correct is not None:
            by_problem[solution.problem_id].append(solution)
    # At least two samples, counting repeats: a problem whose samples all agree still has a vote.
    chosen = [p for p in sorted(by_problem) if sum(s.sample_count for s in by_problem[p]) >= 2][:max_problems]
    texts = label_rows.step_texts(
        [s.pk for s in references] + [s.pk for p in chosen for s in by_problem[p][:max_candidates]]
    )
    return EvalSet(
        labeled=examples,
        references=[(s.problem_id, s.problem.statement, texts[s.pk]) for s in references if s.problem_id in problems],
        bon=[[(s, texts[s.pk]) for s in by_problem[p][:max_candidates]] for p in chosen],
    )


def step_labels(k: list[int], n: list[int]) -> list[int | None]:
    """Majority label per step: 1 good, 0 bad, None when unlabeled or tied."""
    return [None if nn == 0 or 2 * kk == nn else int(2 * kk > nn) for kk, nn in zip(k, n)]


def measure(
    loaded: prm.LoadedPRM | RemotePRM, data: EvalSet, *, backbone_id: str, lam: float = 1.0, threshold: float = 0.5
) -> dict:
    """All evaluation metrics of one loaded model on one EvalSet."""
    samples, problems = scored(loaded, data, backbone_id=backbone_id)
    return evaluation.evaluate(samples, problems, lam=lam, threshold=threshold)


def scored(
    loaded: prm.LoadedPRM | RemotePRM, data: EvalSet, *, backbone_id: str
) -> tuple[list[evaluation.LabeledSample], list[list[evaluation.Candidate]]]:
    """One model's step probabilities on an EvalSet: labeled samples (then references), and
    best-of-N candidates per problem; the same order for every model, so two can be paired."""
    from scoring.core import training  # torch: never imported by the web process

    cache = label_rows.feature_cache()
    labeled_items = [(e.row.problem, list(e.row.steps)) for e in data.labeled]
    ref_items = [(problem, steps) for _, problem, steps in data.references]
    bon_items = [(s.problem.statement, steps) for cands in data.bon for s, steps in cands]
    items = labeled_items + ref_items + bon_items
    if isinstance(loaded, RemotePRM):  # scored at its endpoint: no features to cache
        probs = loaded.step_probabilities(items)
    else:
        probs = training.step_probabilities(loaded, items, cache=cache, backbone_id=backbone_id)
    samples = []
    for e, p in zip(data.labeled, probs):
        labels = step_labels(e.k, e.n)
        first = first_error(-1 if y == 0 else y for y in labels)
        samples.append(evaluation.LabeledSample(e.row.problem_id, [s.p for s in p], labels, first))
    for (problem_id, _, steps), p in zip(data.references, probs[len(labeled_items) :]):
        samples.append(
            evaluation.LabeledSample(problem_id, [s.p for s in p], [None] * len(steps), None, is_reference=True)
        )
    rest = iter(probs[len(labeled_items) + len(ref_items) :])
    problems = [[_candidate(s, next(rest)) for s, _ in cands] for cands in data.bon]
    return samples, problems


def _candidate(solution: Solution, probs: list) -> evaluation.Candidate:
    sigma = [s.sigma for s in probs] if probs and probs[0].sigma is not None else None
    answer = solution.final_answer.strip() if solution.final_answer else None
    return evaluation.Candidate(mu=[s.p for s in probs], correct=bool(solution.is_correct), answer=answer, sigma=sigma,
                                count=solution.sample_count)


def model_backbone_id(version: ModelVersion) -> str:
    from scoring.core import training  # torch: never imported by the web process

    config = read_model_config(version.path)
    return training.backbone_fingerprint(backbone_folder(version.path, config))


def evaluate_version(
    *,
    version: ModelVersion,
    project: Project,
    val_fraction: float = 0.2,
    seed: int = 0,
    threshold: float = 0.5,
    max_problems: int = 32,
    max_candidates: int = 8,
) -> dict:
    """Metrics of any registered version on the project's held-out set today (`eval_prm`)."""
    train, val = split_by_problem(build_examples(label_rows.gather_rows(project=project)),
                                  val_fraction=val_fraction, seed=seed)
    data = eval_set(
        project=project,
        examples=val,
        trained_on={e.row.problem_id for e in train},
        val_fraction=val_fraction,
        seed=seed,
        max_problems=max_problems,
        max_candidates=max_candidates,
    )
    return measure(registry.load(version), data, backbone_id=model_backbone_id(version), threshold=threshold)


def evaluate_and_gate(
    run: TrainingRun,
    version: ModelVersion,
    *,
    examples: list[Example],
    options: RunOptions,
    log: Callable[[str], None],
) -> dict:
    """Measure the new version and the run's project's current one on the same held-out data of
    the project, record the decision on both rows, and promote the new version in the project,
    reject it, or mark it as not enough evidence; returns the decision.

    Held out is what the version's own split says (`metrics["split"]`, recorded when it was
    registered): `examples` of its validation problems, never a problem it trained on. So an
    attempt that resumes a run after its worker died measures what the first attempt would have.
    """
    config = TrainConfig.from_dict(options.train)
    split = version.metrics.get("split")
    if split is None:
        raise ValueError(f"{version.name} was registered without its train/validation split: train a new run")
    held_out = set(split["val_problem_ids"])
    data = eval_set(
        project=run.project,
        examples=[e for e in examples if e.row.problem_id in held_out],
        trained_on=set(split["train_problem_ids"]),
        val_fraction=config.val_fraction,
        seed=config.seed,
        max_problems=options.bon_max_problems,
        max_candidates=options.bon_max_candidates,
    )
    current = registry.current_model(run.project)
    rule = Evidence.of(run.project, tolerance=options.tolerance, val_fraction=config.val_fraction,
                       seed=config.seed)
    n_solutions, n_steps = labeled_counts(data.labeled)
    if current is not None and rule.short_by(n_solutions=n_solutions, n_steps=n_steps):
        log(f"{n_solutions} held-out labeled solutions with {n_steps} labeled steps; the gate needs "
            f"{rule.min_solutions} and {rule.min_steps}: not enough evidence, measured on those alone "
            f"(no references, no best-of-N)")
        data = EvalSet(labeled=data.labeled, references=[], bon=[])
    else:
        log(
            f"evaluating on {len(data.labeled)} held-out labeled solutions, {len(data.references)} references, "
            f"{len(data.bon)} problems for best-of-N"
        )
    new_samples, new_problems = scored(registry.load(version), data, backbone_id=model_backbone_id(version))
    new = evaluation.evaluate(new_samples, new_problems)
    old, old_samples = None, None
    if current is not None:
        old_samples, old_problems = scored(registry.load(current), data, backbone_id=model_backbone_id(current))
        old = evaluation.evaluate(old_samples, old_problems)
    decision = gate(new=new_samples, current=old_samples, metric=options.gate_metric, evidence=rule)
    decision |= {"current_version": current.name if current else None, "new_version": version.name}
    version.metrics = version.metrics | {
        "eval": new,
        "compared_with": current.name if current else None,
        "compared_eval": old,
        "gate": decision,
    }
    version.save(update_fields=["metrics"])
    TrainingRun.objects.filter(pk=run.pk).update(gate=decision)
    log(f"gate on {decision['metric']}: {describe(decision)}")
    if decision["promoted"]:
        promote(version, project=run.project)
    else:
        ModelVersion.objects.filter(pk=version.pk).update(status=decision["outcome"])
    return decision


@dataclass(frozen=True)
class Evidence:
    """What a gain must show before a version is promoted (a project's `promotion_*` settings).

    `tolerance` is the run's own option: how much worse the new model may be (negative: how
    much better it must be), so the interval's lower bound must clear `min_gain - tolerance`.
    """

    min_gain: float = 0.0
    min_solutions: int = 50
    min_steps: int = 200
    tolerance: float = 0.0
    val_fraction: float = 0.2  # the share of labeled problems held out: for "how many more labels"
    resamples: int = 1000
    confidence: float = 0.95
    seed: int = 0

    @classmethod
    def of(cls, project: Project | int, *, tolerance: float = 0.0, val_fraction: float = 0.2,
           seed: int = 0) -> Evidence:
        """The project's bar (LabelingConfig), with the run's tolerance and split."""
        config = LabelingConfig.of(project)
        return cls(min_gain=config.promotion_min_gain, min_solutions=config.promotion_min_solutions,
                   min_steps=config.promotion_min_steps, tolerance=tolerance, val_fraction=val_fraction, seed=seed)

    @property
    def bar(self) -> float:
        return self.min_gain - self.tolerance

    def short_by(self, *, n_solutions: int, n_steps: int) -> int:
        """How many more held-out labeled solutions this rule needs (0: enough), at today's steps per solution."""
        steps_per_solution = n_steps / n_solutions if n_steps else self.min_steps / self.min_solutions
        missing_steps = max(0, self.min_steps - n_steps)
        return max(self.min_solutions - n_solutions, math.ceil(missing_steps / steps_per_solution), 0)


def labeled_counts(examples: Sequence[Example]) -> tuple[int, int]:
    """Held-out labeled solutions and their labeled steps (majority label, not tied), as `gate` counts
    them from the scored samples: known before any model is loaded."""
    return len(examples), sum(label is not None for e in examples for label in step_labels(e.k, e.n))


def gate(
    *,
    new: Sequence[evaluation.LabeledSample],
    current: Sequence[evaluation.LabeledSample] | None,
    metric: str,
    evidence: Evidence,
) -> dict:
    """The promotion decision from both models' scores of the same held-out solutions.

    `outcome` is "promoted", "rejected" or "not_enough_evidence" (a ModelVersion status);
    the counts, the gain and its interval are kept, so the pages can show why.
    """
    rule = evidence
    labeled = [s for s in new if not s.is_reference]
    n_steps = len(evaluation.step_arrays(labeled)[1])
    decision = {
        "metric": metric, "tolerance": rule.tolerance, "min_gain": rule.min_gain,
        "new": evaluation.gate_metric(new, metric), "current": None, "gain": None, "interval": None,
        "confidence": rule.confidence, "resamples": 0,
        "n_solutions": len(labeled), "n_steps": n_steps,
        "min_solutions": rule.min_solutions, "min_steps": rule.min_steps,
        "more_held_out_needed": 0, "more_labels_needed": 0,
    }
    if current is None:
        return decision | _outcome("promoted", "no current model")
    decision["current"] = evaluation.gate_metric(current, metric)
    short = rule.short_by(n_solutions=len(labeled), n_steps=n_steps)
    if short:
        decision |= {"more_held_out_needed": short, "more_labels_needed": math.ceil(short / rule.val_fraction)}
        return decision | _outcome(
            "not_enough_evidence",
            f"{len(labeled)} held-out labeled solutions with {n_steps} labeled steps; the gate needs "
            f"{rule.min_solutions} and {rule.min_steps}",
        )
    paired = evaluation.paired_bootstrap(new, current, metric, resamples=rule.resamples,
                                         confidence=rule.confidence, seed=rule.seed)
    decision |= {"gain": paired.gain, "resamples": paired.resamples,
                 "interval": None if paired.low is None else [paired.low, paired.high]}
    if paired.low is None:
        return decision | _outcome(
            "not_enough_evidence", f"{metric} cannot be measured on the held-out labels yet (need good and bad steps)"
        )
    if paired.low > rule.bar:
        return decision | _outcome("promoted", f"better: the gain's interval lies above {rule.bar:g}")
    return decision | _outcome("rejected", f"not shown better: the gain's interval reaches {rule.bar:g} or below")


def _outcome(outcome: str, reason: str) -> dict:
    return {"outcome": outcome, "promoted": outcome == "promoted", "reason": reason}


def describe(decision: dict) -> str:
    """The decision in one line, for the run's log and the pages: values, gain, interval, outcome."""
    def num(value: float | None) -> str:
        return "—" if value is None else f"{value:.4f}"

    text = f"new {num(decision.get('new'))} vs current {num(decision.get('current'))}"
    if decision.get("interval"):
        low, high = decision["interval"]
        text += (f", gain {num(decision.get('gain'))} ({decision.get('confidence', 0.95):.0%} interval "
                 f"{num(low)} to {num(high)}, {decision.get('resamples')} resamples)")
    text += (f" on {decision.get('n_solutions', '?')} held-out solutions / {decision.get('n_steps', '?')} steps"
             f" -> {decision.get('outcome', 'promoted' if decision.get('promoted') else 'rejected')}"
             f" ({decision.get('reason', '')})")
    return text


def promote(version: ModelVersion, *, project: Project) -> None:
    """Make the version the project's current model; the rescore of the project's pool (and its
    queue's new generation) follows on its own. Other projects keep their models and queues."""
    with transaction.atomic():
        registry.set_current_model(version, project=project)
        scoring.start_rescore(model_version=version, project=project, rebuild_queue=True)
