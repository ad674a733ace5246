"""The retraining loop, Django side: labels -> TrainingRun -> new ModelVersion -> gate -> rescore.

The training and the metrics are plain functions (`scoring.core.training`, `scoring.core.evaluation`);
this module reads labels from the database (through the one step verdict,
`annotate.labeling.verdicts`), keeps the run's row up to date (progress, loss curve, log) so the
page can poll it, and hands the new version to the gate (`scoring.learning.promotion`). The run's
state changes only through the shared job methods (`Job.start`, `succeed`, `fail`).

Everything is a project's: a run trains on its project's labels, starts from its project's
current model and is gated by its project's rules. At most one run per project is pending or
running at any time: the run row holds the `active_slot`, unique per project, while it is
active, so a second start in a project (another scheduler, a double click) fails in the
database, whatever the timing, and two projects train side by side.
"""
from __future__ import annotations

import datetime as dt
import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from annotate.models import Annotation, Generation, Project
from scoring.core.model_files import DEFAULT_SEPARATOR, backbone_folder, read_model_config
from scoring.core.training_data import Example, TrainConfig, build_examples
from scoring.learning import promotion
from scoring.learning.options import RunOptions
from scoring.models import ModelVersion, TrainingRun
from scoring.rescoring import label_rows
from scoring.store import default_model, registry

if TYPE_CHECKING:
    from scoring.core import (
        prm,
        training,  # noqa: F401
    )

SCHEDULE_NAME = "stepwise: retrain the PRM when enough new labels exist"
SCHEDULE_TASK = "scoring.tasks.scheduled_retrain_task"


class TrainingAlreadyActive(Exception):
    """Another training run of the project is pending or running; the message names it."""


# --- starting runs and the lock ---------------------------------------------------------------


def active_run(project: Project) -> TrainingRun | None:
    """The project's pending or running training run, if any."""
    return TrainingRun.objects.filter(project=project, active_slot__isnull=False).first()


def start_training_run(*, project: Project | None = None, options: dict | None = None, created_by=None,
                       trigger: str = TrainingRun.Trigger.MANUAL, enqueue: bool = True) -> TrainingRun:
    """Create a pending run in the project (the sole one when None) and enqueue it after commit;
    raises TrainingAlreadyActive if one of the project's is.

    `enqueue=False` leaves the run for the caller to execute in-process (`train_prm --inline`).
    """
    project = Project.objects.given(project)
    parsed = RunOptions.parse(options)
    fail_stale_runs()  # a run whose worker was killed must not hold the slot forever
    try:
        with transaction.atomic():
            run = TrainingRun.objects.create(
                project=project, config=asdict(parsed), created_by=created_by, trigger=trigger,
                parent=registry.current_model(project),
                n_labels=Annotation.objects.trainable().filter(project=project).count(),
            )
    except IntegrityError:
        # The active_slot, unique per project: another run of the project holds it (maybe committed
        # a moment ago).
        raise TrainingAlreadyActive(
            f"training run {_describe(active_run(project))} of {project.slug} is still active") from None
    if enqueue:
        transaction.on_commit(run.send_task)
    return run


def _describe(run: TrainingRun | None) -> str:
    return f"#{run.pk} ({run.state})" if run else "(just finished)"


def fail_stale_runs(*, now: dt.datetime | None = None) -> int:
    """Fail runs whose worker died: active for longer than the task time limit allows."""
    limit = (now or timezone.now()) - dt.timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 60)
    stale = TrainingRun.objects.active().filter(created_at__lt=limit)
    return sum(run.fail("worker lost: the run exceeded the task time limit") for run in stale)


# --- labels -------------------------------------------------------------------------------------


def new_label_count(project: Project) -> int:
    """The project's labeled solutions submitted (or changed) since its last run started."""
    last = TrainingRun.objects.filter(project=project).order_by("-created_at").first()
    labels = Annotation.objects.trainable().filter(project=project)
    return (labels.filter(updated_at__gt=last.created_at) if last else labels).count()


# --- running a run ------------------------------------------------------------------------------


def run_training(*, run_id: int) -> TrainingRun:
    """Train, register, evaluate and gate one pending run; idempotent (a rerun does nothing).

    A run whose worker died is started over from pending (`jobs.recovery`). If the
    earlier attempt had already registered its version, this attempt finds it
    (`registered_version`) and goes on from there: it trains nothing again and registers
    nothing twice, evaluates on the split recorded with the version, and leaves a version
    already promoted or rejected as it is (its rescore was started with the promotion).

    Any exception, in training, evaluation or promotion, ends the run failed with its
    message and frees the slot (`Job.failure_recorded`); nothing half-written stays behind.
    """
    run = TrainingRun.objects.select_related("parent", "project").get(pk=run_id)
    if not run.start(started_at=timezone.now()):
        return run
    try:
        with run.failure_recorded():
            options, examples = run_inputs(run)
            version = registered_version(run)
            if version is None:
                version = train_and_register(run, options=options, examples=examples)
            else:
                _log(run, f"resumed: {version.name} was registered by an earlier attempt; not training again")
            if version.status == ModelVersion.Status.CANDIDATE:
                promotion.evaluate_and_gate(run, version, examples=examples, options=options,
                                            log=lambda line: _log(run, line))
            else:
                _log(run, f"resumed: {version.name} was already {version.status}; the gate is not run again")
            run.succeed()
    except Exception as error:
        _log(run, f"failed: {type(error).__name__}: {error}")
        if registered_version(run) is None:
            shutil.rmtree(version_folder(run), ignore_errors=True)
        raise
    run.refresh_from_db()
    return run


def run_inputs(run: TrainingRun) -> tuple[RunOptions, list[Example]]:
    """What a run is asked to do, and its project's labeled examples today, that it learns from (and
    is gated on)."""
    options = RunOptions.parse(run.config)
    config = TrainConfig.from_dict(options.train)
    rows = label_rows.gather_rows(project=run.project, labels=config.labels)
    return options, build_examples(rows, neutral=config.neutral)


def _log(run: TrainingRun, line: str) -> None:
    stamp = timezone.now().strftime("%H:%M:%S")
    run.log = f"{run.log}{stamp} {line}\n"
    TrainingRun.objects.filter(pk=run.pk).update(log=run.log)


def _parent_backbone(parent: ModelVersion | None, project: Project) -> tuple[ModelVersion, Path, str, dict]:
    """(parent, backbone folder, separator, head config) training starts from: the project's current
    model's (the default model's, made current there, when it has none)."""
    if parent is None:
        parent = default_model.ensure_default_model(project=project)
    if parent.kind == ModelVersion.Kind.REMOTE:
        raise ValueError(f"model {parent.name!r} is served at {parent.path}: there are no weights here to train from")
    config = read_model_config(parent.path)
    folder = backbone_folder(parent.path, config)
    return parent, folder, config.get("separator", DEFAULT_SEPARATOR), config.get("head") or {}


def _training_backbone(parent: ModelVersion, folder: Path, separator: str, config: TrainConfig) -> prm.LoadedPRM:
    """The backbone a run trains on.

    Head mode reads frozen features in the scoring dtype (what the head sees when scoring)
    from the parent as the worker already holds it (`registry.load`), or from the backbone the
    process shares (`frozen=True`), so a retrain loads no second backbone. A trained backbone
    starts from a fresh fp32 copy (bf16 autocast on GPU): training changes its weights.
    """
    # torch (and scoring.core.prm, training, which import it): never imported by the web process.
    import torch

    from scoring.core import prm, training

    if config.mode == "head" and parent.kind == ModelVersion.Kind.HEAD:
        loaded = registry.load(parent)
        assert isinstance(loaded, prm.LoadedPRM)  # a head version is loaded here (only remote ones are not)
        return loaded
    if config.mode == "head":
        return training.load_backbone(folder, separator=separator, dtype=registry._dtype_setting(), frozen=True)
    return training.load_backbone(folder, separator=separator, dtype=torch.float32)


def version_name(run: TrainingRun) -> str:
    """The new version's name, also its folder: unique because the run id is."""
    train = run.config.get("train", {})
    return f"run{run.pk}-{train.get('head', 'point')}-{train.get('mode', 'head')}"


def version_folder(run: TrainingRun) -> Path:
    return settings.MODELS_DIR / version_name(run)


def registered_version(run: TrainingRun) -> ModelVersion | None:
    """The version this run registered, if an attempt got that far (found by its name, unique per run)."""
    return ModelVersion.objects.filter(name=version_name(run)).first()


def train_and_register(run: TrainingRun, *, options: RunOptions, examples: list[Example]) -> ModelVersion:
    """Train on the labeled examples, write the version's folder and register it with its split."""
    from scoring.core import training  # torch: never imported by the web process

    config = TrainConfig.from_dict(options.train)
    folder = version_folder(run)
    if not examples:
        raise ValueError(f"no labeled steps to train on ({config.labels} labels): submit or compute some first")
    _log(run, f"labels: {config.labels}; {sum(e.human_labels for e in examples)} human and "
              f"{sum(e.automatic_labels for e in examples)} automatic step labels")
    parent, backbone_folder, separator, parent_head = _parent_backbone(run.parent, run.project)
    if config.layer is None and parent_head.get("layer") is not None:
        config.layer = parent_head["layer"]  # same read-out layer: the feature cache stays warm
    _log(run, f"{len(examples)} labeled solutions; backbone {backbone_folder.name}; "
              f"{config.head} head, mode {config.mode}")
    backbone = _training_backbone(parent, backbone_folder, separator, config)
    progress = _ProgressWriter(run)
    result = training.train([e.row for e in examples], backbone=backbone, config=config,
                            cache=label_rows.feature_cache(),
                            backbone_id=training.backbone_fingerprint(backbone_folder), progress=progress)
    progress.flush()
    shutil.rmtree(folder, ignore_errors=True)  # what a killed attempt wrote before registering: not a version
    training.save_checkpoint(result, folder, parent_backbone=backbone_folder, tokenizer=backbone.tokenizer,
                             separator=separator, extra_meta={"run_id": run.pk})
    # The version, its split and the run's link to it in one transaction: an attempt killed
    # after this finds all three (`registered_version`), one killed before finds none.
    # What it learned from, for the models page: labels up to the queue generation served now.
    trained_on = {"solutions": len(examples), "step_labels": sum(sum(e.n) for e in examples),
                  "labels": config.labels,
                  "generation": Generation.objects.filter(project=run.project_id).current_number(),
                  "head": config.head, "mode": config.mode, "backbone": backbone_folder.name}
    with transaction.atomic():
        version = registry.register_model_version(
            name=folder.name, path=folder, project=run.project, parent=run.parent,
            metrics={"training": result.metrics, "split": result.split(), "trained_on": trained_on},
        )
        TrainingRun.objects.filter(pk=run.pk).update(result=version, config=run.config | {"train": asdict(config)})
    _log(run, f"trained in {result.seconds:.1f}s ({result.tokens} backbone tokens); registered {folder.name}")
    return version


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
        self.run.record_progress(done=done, total=total, loss_curve=self.curve)
        if point is not None:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            self.run.log += "\n".join(self.lines) + "\n"
            self.lines = []
            TrainingRun.objects.filter(pk=self.run.pk).update(log=self.run.log)


# --- the schedule ---------------------------------------------------------------------------------


def scheduled_retrain(*, project: Project, min_new_labels: int, options: dict | None = None) -> TrainingRun | None:
    """Start a run in the project when at least `min_new_labels` of its labeled solutions are new;
    else do nothing."""
    fail_stale_runs()
    if active_run(project) is not None or new_label_count(project) < min_new_labels:
        return None
    try:
        return start_training_run(project=project, options=options, trigger=TrainingRun.Trigger.SCHEDULE)
    except TrainingAlreadyActive:
        return None  # another scheduler won the race: exactly what the lock is for


def schedule_name(project: Project) -> str:
    return f"{SCHEDULE_NAME} in {project.slug}"


def projects_on_the_shared_schedule() -> list[int]:
    """The projects the site's schedule (SCHEDULE_NAME, made by migration 0004) retrains, one task
    each: those without a schedule of their own (`ensure_schedule`)."""
    own = PeriodicTask.objects.filter(task=SCHEDULE_TASK, name__startswith=f"{SCHEDULE_NAME} in ")
    scheduled = {json.loads(kwargs or "{}").get("project_id") for kwargs in own.values_list("kwargs", flat=True)}
    return [pk for pk in Project.objects.order_by("pk").values_list("pk", flat=True) if pk not in scheduled]


def ensure_schedule(*, project: Project, every_minutes: int = 30, min_new_labels: int = 50) -> object:
    """Create the project's own periodic retrain task once, in place of the site's schedule for it
    (its interval and threshold, edited in the admin; we never overwrite). Without one, a project
    is retrained by the site's schedule, which sends one task per project."""
    interval, _ = IntervalSchedule.objects.get_or_create(every=every_minutes, period=IntervalSchedule.MINUTES)
    task, _ = PeriodicTask.objects.get_or_create(
        name=schedule_name(project),
        defaults={"task": SCHEDULE_TASK, "interval": interval, "queue": "ml",
                  "kwargs": json.dumps({"project_id": project.pk, "min_new_labels": min_new_labels})},
    )
    return task
