"""The promotion gate: a trained version is measured next to the current one on the same
held-out data, and becomes current only if it is not worse on the run's metric.

Held out means problems the new model never saw: the labeled validation problems of the
split (by problem, stable as data grows) plus pool problems the split would hold out,
with their reference solutions (paired AUC) and graded candidates (best-of-N). The
metrics themselves are plain functions in `scoring.core.evaluation`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import transaction

from annotate.models import Solution
from annotate.text.steps import first_error
from scoring.core import evaluation
from scoring.core.training_data import Example, TrainConfig, build_examples, is_validation_problem, split_by_problem
from scoring.learning.options import RunOptions
from scoring.models import ModelVersion, TrainingRun
from scoring.rescoring import label_rows

if TYPE_CHECKING:
    from scoring.core import prm
    from scoring.store.remote_scorer import RemotePRM


@dataclass
class EvalSet:
    """The held-out data both models are measured on: same problems, same solutions."""

    labeled: list[Example]  # labeled solutions of held-out problems
    references: list[tuple[int, str, list[str]]]  # (problem id, problem, steps)
    bon: list[list[tuple[Solution, list[str]]]]  # per problem: graded candidates


def eval_set(
    *,
    examples: list[Example],
    trained_on: set[int],
    val_fraction: float,
    seed: int,
    max_problems: int,
    max_candidates: int,
) -> EvalSet:
    """Held-out labeled solutions plus, on held-out problems, references and graded candidates.

    Held out: the labeled validation problems and any pool problem the split would hold
    out, never a problem the new model was trained on.
    """
    problems = {e.row.problem_id for e in examples}
    pool = Solution.objects.filter(is_gold=False).exclude(steps__isnull=True).select_related("problem").order_by("pk")
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
    from scoring.core import training
    from scoring.store.remote_scorer import RemotePRM

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
    return evaluation.evaluate(samples, problems, lam=lam, threshold=threshold)


def _candidate(solution: Solution, probs: list) -> evaluation.Candidate:
    sigma = [s.sigma for s in probs] if probs and probs[0].sigma is not None else None
    answer = solution.final_answer.strip() if solution.final_answer else None
    return evaluation.Candidate(mu=[s.p for s in probs], correct=bool(solution.is_correct), answer=answer, sigma=sigma,
                                count=solution.sample_count)


def model_backbone_id(version: ModelVersion) -> str:
    from scoring.core import (
        prm,
        training,  # noqa: F401
    )

    config = prm.read_model_config(version.path)
    return training.backbone_fingerprint(prm.backbone_folder(version.path, config))


def evaluate_version(
    *,
    version: ModelVersion,
    val_fraction: float = 0.2,
    seed: int = 0,
    threshold: float = 0.5,
    max_problems: int = 32,
    max_candidates: int = 8,
) -> dict:
    """Metrics of any registered version on today's held-out set (`eval_prm`)."""
    from scoring.store import registry

    train, val = split_by_problem(build_examples(label_rows.gather_rows()), val_fraction=val_fraction, seed=seed)
    data = eval_set(
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
    """Measure the new version and the current one on the same held-out data, record the
    decision on both rows, and promote or reject the new version; returns the decision.

    Held out is what the version's own split says (`metrics["split"]`, recorded when it was
    registered): `examples` of its validation problems, never a problem it trained on. So an
    attempt that resumes a run after its worker died measures what the first attempt would have.
    """
    from scoring.store import registry

    config = TrainConfig.from_dict(options.train)
    split = version.metrics.get("split")
    if split is None:
        raise ValueError(f"{version.name} was registered without its train/validation split: train a new run")
    held_out = set(split["val_problem_ids"])
    data = eval_set(
        examples=[e for e in examples if e.row.problem_id in held_out],
        trained_on=set(split["train_problem_ids"]),
        val_fraction=config.val_fraction,
        seed=config.seed,
        max_problems=options.bon_max_problems,
        max_candidates=options.bon_max_candidates,
    )
    log(
        f"evaluating on {len(data.labeled)} held-out labeled solutions, {len(data.references)} references, "
        f"{len(data.bon)} problems for best-of-N"
    )
    new = measure(registry.load(version), data, backbone_id=model_backbone_id(version))
    current = ModelVersion.objects.current()
    old = measure(registry.load(current), data, backbone_id=model_backbone_id(current)) if current else None
    decision = gate(new=new, current=old, metric=options.gate_metric, tolerance=options.tolerance)
    decision |= {"current_version": current.name if current else None, "new_version": version.name}
    version.metrics = version.metrics | {
        "eval": new,
        "compared_with": current.name if current else None,
        "compared_eval": old,
        "gate": decision,
    }
    version.save(update_fields=["metrics"])
    TrainingRun.objects.filter(pk=run.pk).update(gate=decision)
    log(
        f"gate on {decision['metric']}: new {decision['new']} vs current {decision['current']} -> "
        f"{'promoted' if decision['promoted'] else 'rejected'} ({decision['reason']})"
    )
    if decision["promoted"]:
        promote(version)
    else:
        ModelVersion.objects.filter(pk=version.pk).update(status=ModelVersion.Status.REJECTED)
    return decision


def gate(*, new: dict, current: dict | None, metric: str, tolerance: float = 0.0) -> dict:
    """The promotion decision, with both values, so the page can show why."""
    promoted = current is None or evaluation.not_worse(new, current, metric, tolerance)
    value = evaluation.metric_value(new, metric)
    if current is None:
        reason = "no current model"
    elif value is None:
        reason = f"{metric} cannot be measured on the held-out labels yet (need good and bad steps)"
    else:
        reason = "not worse than the current model" if promoted else "worse than the current model"
    return {
        "metric": metric,
        "tolerance": tolerance,
        "new": value,
        "current": evaluation.metric_value(current, metric) if current else None,
        "promoted": promoted,
        "reason": reason,
    }


def promote(version: ModelVersion) -> None:
    """Make the version current; its rescore (and the new queue generation) follows on its own."""
    from scoring.rescoring import rescore as scoring
    from scoring.store import registry

    with transaction.atomic():
        registry.make_current_version(version)
        scoring.start_rescore(model_version=version, rebuild_queue=True)
