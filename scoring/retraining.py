"""The retraining loop, Django side: labels -> TrainingRun -> new ModelVersion -> gate -> rescore.

The training and the metrics are plain functions (`scoring.training`, `scoring.evaluation`);
this module reads labels from the database, keeps the run's row up to date (state,
progress, loss curve, log) so the page can poll it, and decides promotion.

At most one run is pending or running at any time: the run row holds the unique
`active_slot` while it is active, so a second start (another scheduler, a double click)
fails in the database, whatever the timing.
"""
from __future__ import annotations

import datetime as dt
import shutil
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from annotate.models import Annotation, Completion, FinishReason, Solution, Step
from annotate.models.jobs import JobState

from . import evaluation
from .models import ModelVersion, TrainingRun
from .training_data import (
    Example,
    LabeledRow,
    TrainConfig,
    build_examples,
    is_validation_problem,
    split_by_problem,
    stratum_weights,
)

if TYPE_CHECKING:
    from . import prm, training  # noqa: F401

SCHEDULE_NAME = "stepwise: retrain the PRM when enough new labels exist"
SCHEDULE_TASK = "scoring.tasks.scheduled_retrain_task"
DEFAULT_GATE_METRIC = "step_auc"
ACTIVE = (JobState.PENDING, JobState.RUNNING)


class TrainingAlreadyActive(Exception):
    """Another training run is pending or running; the message names it."""


# --- starting runs and the lock ---------------------------------------------------------------


@dataclass
class RunOptions:
    """What a run is asked to do: the training config plus evaluation and gate options."""

    train: dict
    gate_metric: str = DEFAULT_GATE_METRIC
    # How much worse the new model may be and still pass; negative demands an improvement.
    tolerance: float = 0.0
    bon_max_problems: int = 32
    bon_max_candidates: int = 8

    @classmethod
    def parse(cls, data: dict | None) -> RunOptions:
        """Check a run's options now, so a typo fails the start, not the worker an hour later."""
        data = dict(data or {})
        options = cls(train=data.pop("train", {}), **{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown run option(s): {', '.join(sorted(unknown))}")
        TrainConfig.from_dict(options.train)
        if options.gate_metric not in evaluation.GATE_METRICS:
            raise ValueError(f"gate_metric={options.gate_metric!r}; expected one of {', '.join(evaluation.GATE_METRICS)}")
        return options


def active_run() -> TrainingRun | None:
    return TrainingRun.objects.filter(active_slot__isnull=False).first()


def start_training_run(*, options: dict | None = None, created_by=None,
                       trigger: str = TrainingRun.Trigger.MANUAL, enqueue: bool = True) -> TrainingRun:
    """Create a pending run and enqueue it after commit; raises TrainingAlreadyActive if one is.

    `enqueue=False` leaves the run for the caller to execute in-process (`train_prm --inline`).
    """
    from .tasks import train_prm_task

    parsed = RunOptions.parse(options)
    fail_stale_runs()  # a run whose worker was killed must not hold the slot forever
    try:
        with transaction.atomic():
            run = TrainingRun.objects.create(
                config=asdict(parsed), created_by=created_by, trigger=trigger,
                parent=ModelVersion.objects.current(), n_labels=submitted_annotations().count(),
            )
    except IntegrityError:
        # The unique active_slot: someone else's run holds it (maybe committed a moment ago).
        raise TrainingAlreadyActive(f"training run {_describe(active_run())} is still active") from None
    if enqueue:
        train_prm_task.delay_on_commit(run.pk)
    return run


def _describe(run: TrainingRun | None) -> str:
    return f"#{run.pk} ({run.state})" if run else "(just finished)"


def finish_run(run: TrainingRun, *, state: str, error: str = "") -> None:
    """End a run and free the slot in the same UPDATE."""
    TrainingRun.objects.filter(pk=run.pk, state__in=ACTIVE).update(
        state=state, error=error[:5000], active_slot=None, finished_at=timezone.now()
    )


def fail_stale_runs(*, now: dt.datetime | None = None) -> int:
    """Fail runs whose worker died: active for longer than the task time limit allows."""
    limit = (now or timezone.now()) - dt.timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 60)
    stale = TrainingRun.objects.filter(state__in=ACTIVE, created_at__lt=limit)
    return stale.update(state=JobState.FAILED, error="worker lost: the run exceeded the task time limit",
                        active_slot=None, finished_at=timezone.now())


# --- labels -------------------------------------------------------------------------------------


def submitted_annotations():
    """Annotations whose labels are used: submitted, and not flagged as a bad problem."""
    return Annotation.objects.filter(status=Annotation.Status.SUBMITTED).exclude(finish_reason=FinishReason.BAD_PROBLEM)


def gather_rows(*, solution_ids=None) -> list[LabeledRow]:
    """Every labeled solution as a LabeledRow: one rating list per annotation.

    A step's rating is that of its chosen completion, or of completion 0 when none was
    chosen (the step where the annotator stopped), as in PRM800K.
    """
    annotations = submitted_annotations()
    if solution_ids is not None:
        annotations = annotations.filter(solution_id__in=solution_ids)
    ratings: dict[int, dict[int, dict[int, int | None]]] = defaultdict(lambda: defaultdict(dict))
    rows = Completion.objects.filter(step_label__annotation__in=annotations).filter(
        Q(index=F("step_label__chosen_completion")) | Q(step_label__chosen_completion__isnull=True, index=0)
    )
    for annotation_id, solution_id, index, rating in rows.values_list(
        "step_label__annotation_id", "step_label__annotation__solution_id", "step_label__index", "rating"
    ).iterator(chunk_size=5000):
        ratings[solution_id][annotation_id][index] = rating
    solutions = list(Solution.objects.filter(pk__in=ratings).select_related("problem").order_by("pk"))
    texts = _step_texts(list(ratings))
    strata = [s.is_correct for s in solutions]
    weights = stratum_weights(strata, pool_strata())
    result = []
    for solution, weight in zip(solutions, weights):
        steps = texts.get(solution.pk, [])
        per_annotation = [tuple(r.get(i) for i in range(len(steps))) for _, r in sorted(ratings[solution.pk].items())]
        result.append(LabeledRow(solution_id=solution.pk, problem_id=solution.problem_id,
                                 problem=solution.problem.statement, steps=tuple(steps),
                                 ratings=tuple(per_annotation), weight=weight))
    return result


def _step_texts(solution_ids) -> dict[int, list[str]]:
    texts: dict[int, list[str]] = defaultdict(list)
    rows = Step.objects.filter(solution_id__in=solution_ids).order_by("solution_id", "index")
    for solution_id, text in rows.values_list("solution_id", "text").iterator(chunk_size=5000):
        texts[solution_id].append(text)
    return texts


def pool_strata() -> dict[bool | None, int]:
    """How the pool splits by answer correctness: the mix labels are reweighted to."""
    pool = Solution.objects.filter(is_reference=False, is_gold=False)
    return {row["is_correct"]: row["n"] for row in pool.values("is_correct").annotate(n=Count("pk"))}


def new_label_count() -> int:
    """Labeled solutions submitted (or changed) since the last run started."""
    last = TrainingRun.objects.order_by("-created_at").first()
    labels = submitted_annotations()
    return (labels.filter(updated_at__gt=last.created_at) if last else labels).count()


# --- running a run ------------------------------------------------------------------------------


def run_training(*, run_id: int) -> TrainingRun:
    """Train, evaluate, register and gate one pending run; idempotent (a rerun does nothing)."""
    claimed = TrainingRun.objects.filter(pk=run_id, state=JobState.PENDING).update(
        state=JobState.RUNNING, started_at=timezone.now()
    )
    run = TrainingRun.objects.select_related("parent").get(pk=run_id)
    if not claimed:
        return run
    folder = settings.MODELS_DIR / version_name(run)
    try:
        version, result = _train_and_register(run, folder)
        _evaluate_and_gate(run, version, result)
        finish_run(run, state=JobState.SUCCEEDED)
    except Exception as error:
        _log(run, f"failed: {type(error).__name__}: {error}")
        finish_run(run, state=JobState.FAILED, error=f"{type(error).__name__}: {error}")
        if not ModelVersion.objects.filter(name=folder.name).exists():
            shutil.rmtree(folder, ignore_errors=True)  # nothing half-written stays behind
        raise
    run.refresh_from_db()
    return run


def _log(run: TrainingRun, line: str) -> None:
    stamp = timezone.now().strftime("%H:%M:%S")
    run.log = f"{run.log}{stamp} {line}\n"
    TrainingRun.objects.filter(pk=run.pk).update(log=run.log)


def feature_cache() -> training.FeatureCache:
    from .training import FeatureCache

    return FeatureCache(settings.MODELS_DIR / "feature-cache")


def _parent_backbone(parent: ModelVersion | None) -> tuple[Path, str, dict]:
    """(backbone folder, separator, head config) training starts from: the current model's."""
    from . import default_model, prm

    if parent is None:
        parent = default_model.ensure_default_model()
    config = prm.read_model_config(parent.path)
    return prm.backbone_folder(parent.path, config), config.get("separator", prm.DEFAULT_SEPARATOR), config.get("head") or {}


def version_name(run: TrainingRun) -> str:
    """The new version's name, also its folder: unique because the run id is."""
    train = run.config.get("train", {})
    return f"run{run.pk}-{train.get('head', 'point')}-{train.get('mode', 'head')}"


def _train_and_register(run: TrainingRun, folder: Path) -> tuple[ModelVersion, training.TrainResult]:
    import torch

    from . import registry, training

    options = RunOptions.parse(run.config)
    config = TrainConfig.from_dict(options.train)
    rows = gather_rows()
    if not build_examples(rows, neutral=config.neutral):
        raise ValueError("no labeled steps to train on: submit some labels first")
    backbone_folder, separator, parent_head = _parent_backbone(run.parent)
    if config.layer is None and parent_head.get("layer") is not None:
        config.layer = parent_head["layer"]  # same read-out layer: the feature cache stays warm
    _log(run, f"{len(rows)} labeled solutions; backbone {backbone_folder.name}; {config.head} head, mode {config.mode}")
    # Head-only features in the scoring dtype (what the head will see when scoring);
    # trained backbones keep fp32 weights (bf16 autocast on GPU).
    dtype = registry._dtype_setting() if config.mode == "head" else torch.float32
    backbone = training.load_backbone(backbone_folder, separator=separator, dtype=dtype)
    progress = _ProgressWriter(run)
    result = training.train(rows, backbone=backbone, config=config, cache=feature_cache(),
                            backbone_id=training.backbone_fingerprint(backbone_folder), progress=progress)
    progress.flush()
    training.save_checkpoint(result, folder, parent_backbone=backbone_folder, tokenizer=backbone.tokenizer,
                             separator=separator, extra_meta={"run_id": run.pk})
    version = registry.register_model_version(name=folder.name, path=folder, parent=run.parent,
                                              metrics={"training": result.metrics})
    TrainingRun.objects.filter(pk=run.pk).update(result=version, config=run.config | {"train": asdict(config)})
    _log(run, f"trained in {result.seconds:.1f}s ({result.tokens} backbone tokens); registered {folder.name}")
    return version, result


class _ProgressWriter:
    """The training callback: progress, loss curve and log lines into the run row."""

    def __init__(self, run: TrainingRun):
        self.run = run
        self.curve: list[dict] = []
        self.lines: list[str] = []

    def __call__(self, done: int, total: int, message: str, point: dict | None) -> None:
        if point is not None:
            self.curve.append(point)
            self.lines.append(f"{timezone.now():%H:%M:%S} {message}")
        TrainingRun.objects.filter(pk=self.run.pk).update(done=done, total=total, loss_curve=self.curve)
        if point is not None:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            self.run.log += "\n".join(self.lines) + "\n"
            self.lines = []
            TrainingRun.objects.filter(pk=self.run.pk).update(log=self.run.log)


# --- evaluation and the gate -----------------------------------------------------------------


@dataclass
class EvalSet:
    """The held-out data both models are measured on: same problems, same solutions."""

    labeled: list[Example]  # labeled solutions of held-out problems
    references: list[tuple[int, str, list[str]]]  # (problem id, problem, steps)
    bon: list[list[tuple[Solution, list[str]]]]  # per problem: graded candidates


def eval_set(*, examples: list[Example], trained_on: set[int], val_fraction: float, seed: int, max_problems: int,
             max_candidates: int) -> EvalSet:
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
            solution.problem_id, val_fraction=val_fraction, seed=seed)
        if not held_out or solution.problem_id in trained_on:
            continue
        if solution.is_reference:
            references.append(solution)
        elif solution.is_correct is not None:
            by_problem[solution.problem_id].append(solution)
    chosen = [p for p in sorted(by_problem) if len(by_problem[p]) >= 2][:max_problems]
    texts = _step_texts([s.pk for s in references] + [s.pk for p in chosen for s in by_problem[p][:max_candidates]])
    return EvalSet(
        labeled=examples,
        references=[(s.problem_id, s.problem.statement, texts[s.pk]) for s in references if s.problem_id in problems],
        bon=[[(s, texts[s.pk]) for s in by_problem[p][:max_candidates]] for p in chosen],
    )


def step_labels(k: list[int], n: list[int]) -> list[int | None]:
    """Majority label per step: 1 good, 0 bad, None when unlabeled or tied."""
    return [None if nn == 0 or 2 * kk == nn else int(2 * kk > nn) for kk, nn in zip(k, n)]


def measure(loaded: prm.LoadedPRM, data: EvalSet, *, backbone_id: str, lam: float = 1.0, threshold: float = 0.5) -> dict:
    """All evaluation metrics of one loaded model on one EvalSet."""
    from . import training

    cache = feature_cache()
    labeled_items = [(e.row.problem, list(e.row.steps)) for e in data.labeled]
    ref_items = [(problem, steps) for _, problem, steps in data.references]
    bon_items = [(s.problem.statement, steps) for cands in data.bon for s, steps in cands]
    probs = training.step_probabilities(loaded, labeled_items + ref_items + bon_items, cache=cache, backbone_id=backbone_id)
    samples = []
    for e, p in zip(data.labeled, probs):
        labels = step_labels(e.k, e.n)
        first = next((i for i, y in enumerate(labels) if y == 0), -1)
        samples.append(evaluation.LabeledSample(e.row.problem_id, [s.p for s in p], labels, first))
    for (problem_id, _, steps), p in zip(data.references, probs[len(labeled_items):]):
        samples.append(evaluation.LabeledSample(problem_id, [s.p for s in p], [None] * len(steps), -1, is_reference=True))
    rest = iter(probs[len(labeled_items) + len(ref_items):])
    problems = [[_candidate(s, next(rest)) for s, _ in cands] for cands in data.bon]
    return evaluation.evaluate(samples, problems, lam=lam, threshold=threshold)


def _candidate(solution: Solution, probs: list) -> evaluation.Candidate:
    sigma = [s.sigma for s in probs] if probs and probs[0].sigma is not None else None
    answer = solution.final_answer.strip() if solution.final_answer else None
    return evaluation.Candidate(mu=[s.p for s in probs], correct=bool(solution.is_correct), answer=answer, sigma=sigma)


def model_backbone_id(version: ModelVersion) -> str:
    from . import prm, training  # noqa: F401

    config = prm.read_model_config(version.path)
    return training.backbone_fingerprint(prm.backbone_folder(version.path, config))


def evaluate_version(*, version: ModelVersion, val_fraction: float = 0.2, seed: int = 0, threshold: float = 0.5,
                     max_problems: int = 32, max_candidates: int = 8) -> dict:
    """Metrics of any registered version on today's held-out set (`eval_prm`)."""
    from . import registry

    train, val = split_by_problem(build_examples(gather_rows()), val_fraction=val_fraction, seed=seed)
    data = eval_set(examples=val, trained_on={e.row.problem_id for e in train}, val_fraction=val_fraction, seed=seed,
                    max_problems=max_problems, max_candidates=max_candidates)
    return measure(registry.load(version), data, backbone_id=model_backbone_id(version), threshold=threshold)


def _evaluate_and_gate(run: TrainingRun, version: ModelVersion, result: training.TrainResult) -> None:
    from . import registry

    options = RunOptions.parse(run.config)
    data = eval_set(examples=result.val_examples, trained_on={e.row.problem_id for e in result.train_examples},
                    val_fraction=result.config.val_fraction, seed=result.config.seed,
                    max_problems=options.bon_max_problems, max_candidates=options.bon_max_candidates)
    _log(run, f"evaluating on {len(data.labeled)} held-out labeled solutions, {len(data.references)} references, "
              f"{len(data.bon)} problems for best-of-N")
    new = measure(registry.load(version), data, backbone_id=model_backbone_id(version))
    current = ModelVersion.objects.current()
    old = measure(registry.load(current), data, backbone_id=model_backbone_id(current)) if current else None
    decision = gate(new=new, current=old, metric=options.gate_metric, tolerance=options.tolerance)
    decision |= {"current_version": current.name if current else None, "new_version": version.name}
    version.metrics = version.metrics | {"eval": new, "compared_with": current.name if current else None,
                                         "compared_eval": old, "gate": decision}
    version.save(update_fields=["metrics"])
    TrainingRun.objects.filter(pk=run.pk).update(gate=decision)
    _log(run, f"gate on {decision['metric']}: new {decision['new']} vs current {decision['current']} -> "
              f"{'promoted' if decision['promoted'] else 'rejected'} ({decision['reason']})")
    if decision["promoted"]:
        promote(version)
    else:
        ModelVersion.objects.filter(pk=version.pk).update(status=ModelVersion.Status.REJECTED)


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
    return {"metric": metric, "tolerance": tolerance, "new": value,
            "current": evaluation.metric_value(current, metric) if current else None, "promoted": promoted,
            "reason": reason}


def promote(version: ModelVersion) -> None:
    """Make the version current; its rescore (and the new queue generation) follows on its own."""
    from . import registry, scoring

    with transaction.atomic():
        registry.make_current_version(version)
        scoring.start_rescore(model_version=version, rebuild_queue=True)


# --- the schedule ---------------------------------------------------------------------------------


def scheduled_retrain(*, min_new_labels: int, options: dict | None = None) -> TrainingRun | None:
    """Start a run when at least `min_new_labels` labeled solutions are new; else do nothing."""
    fail_stale_runs()
    if active_run() is not None or new_label_count() < min_new_labels:
        return None
    try:
        return start_training_run(options=options, trigger=TrainingRun.Trigger.SCHEDULE)
    except TrainingAlreadyActive:
        return None  # another scheduler won the race: exactly what the lock is for


def ensure_schedule(*, every_minutes: int = 30, min_new_labels: int = 50) -> object:
    """Create the periodic retrain task once (admins edit it in the admin; we never overwrite)."""
    import json

    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    interval, _ = IntervalSchedule.objects.get_or_create(every=every_minutes, period=IntervalSchedule.MINUTES)
    task, _ = PeriodicTask.objects.get_or_create(
        name=SCHEDULE_NAME,
        defaults={"task": SCHEDULE_TASK, "interval": interval, "queue": "ml",
                  "kwargs": json.dumps({"min_new_labels": min_new_labels})},
    )
    return task
