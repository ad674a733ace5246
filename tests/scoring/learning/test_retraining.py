"""The retraining loop: labels from the real labeling code -> run -> gate -> promotion -> rescore."""
import datetime as dt
import json
import threading

import pytest
import torch
from django.db import IntegrityError, connection, transaction
from django.urls import reverse
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from annotate.labeling import actions as labeling
from annotate.labeling import queueing, reviewing, verdicts
from annotate.models import Annotation, Completion, Generation, LabelingConfig, Project
from annotate.pool import exporting
from annotate.pool.exporting import ExportOptions, ExportTally
from bench.tiny import build_tiny_backbone
from jobs import recovery
from jobs.holders import heartbeats
from jobs.states import JobState
from scoring.core import evaluation
from scoring.core.prm import StepHead, save_head_model
from scoring.learning import promotion, retraining
from scoring.models import ModelVersion, RescoreJob, SolutionScore, TrainingRun
from scoring.rescoring import label_rows
from scoring.store import registry
from scoring.tasks import scheduled_retrain_task
from tests.annotate.pool.test_exporting import PHASE1_LINE, import_lines
from tests.annotations import annotate
from tests.conftest import wait_for
from tests.factories import ProblemFactory, SolutionFactory, user_with_role
from tests.jobs.test_recovery import DEAD, lose_broker_messages
from tests.scoring.projects import solution_in, two_projects
from tests.scoring.test_tasks import worker_factory  # noqa: F401  (a fixture)

WRONG = "so the answer is wrong"
FAST = {"train": {"epochs": 60, "lr": 0.03, "val_fraction": 0.25}, "bon_max_problems": 8}


@pytest.fixture(autouse=True)
def fresh_model_cache():
    # Primary keys can be reused between tests (SQLite rolls back its sequence); a model
    # cached under a reused pk would be the wrong one.
    registry.forget_loaded()
    yield
    registry.forget_loaded()


def here() -> Project:
    """The project these tests work in: the only one."""
    return Project.objects.sole()


@pytest.fixture
def lenient_gate(db):
    """A gate that takes the small pool's held-out set (3 to 6 solutions, by problem ids) as enough
    evidence: the project's settings (which real workers read too); the defaults are tested in
    test_promotion_gate.py."""
    LabelingConfig.objects.update_or_create(
        project=here(), defaults={"promotion_min_solutions": 1, "promotion_min_steps": 1})


@pytest.fixture
def constant_current(db, tmp_path):
    """A current model whose head says 0.5 for every step: step AUC exactly 0.5."""
    backbone = build_tiny_backbone(tmp_path / "backbone")
    head = StepHead(32, "point")
    with torch.no_grad():
        head.mu.weight.zero_()
        head.mu.bias.zero_()
    folder = save_head_model(tmp_path / "constant", head=head, backbone=str(backbone.resolve()), layer=1)
    return registry.register_model_version(name="constant", path=folder, make_current=True)


def make_pool(problems: int = 16, per_problem: int = 3):
    """Solutions whose step saying 'wrong' is the first error (and the answer is then wrong)."""
    for p in range(problems):
        problem = ProblemFactory(statement=f"Problem {p}: add the numbers.")
        for s in range(per_problem):
            bad = (p + s) % per_problem  # the last index means: no wrong step
            steps = [WRONG if i == bad and bad < 2 else f"add {i} and {p}" for i in range(3)]
            SolutionFactory(problem=problem, steps=steps, is_correct=WRONG not in steps,
                            final_answer="1" if WRONG not in steps else str(2 + s))


def label_everything(annotator) -> int:
    """Label the queue through the real labeling code, as the page does: rate in order, submit."""
    queueing.ensure_default_queue()
    done = 0
    while (task := queueing.claim_next(annotator=annotator)) is not None:
        for step in task.solution.steps.order_by("index"):
            wrong = step.text == WRONG
            labeling.rate(annotation=task, index=step.index, rating=-1 if wrong else 1)
            if wrong:
                break
        labeling.submit(annotation=task)
        done += 1
    return done


# --- labels ---------------------------------------------------------------------------------------


@pytest.mark.embedded
def test_rows_hold_one_rating_list_per_annotator_up_to_the_first_error(db):
    solution = SolutionFactory(steps=["a", "b", "c"], is_correct=False)
    annotate(solution, [1, -1], labeler="one")
    annotate(solution, [1, 0, 1], labeler="two")
    annotate(solution, [1, 1, 1], labeler="three", finish_reason="bad_problem")  # not used
    annotate(solution, [1, 1, 1], labeler="four", status=Annotation.Status.IN_PROGRESS)  # not used
    [row] = label_rows.gather_rows()
    assert row.steps == ("a", "b", "c")
    assert sorted(row.ratings) == [(1, -1, None), (1, 0, 1)]


@pytest.mark.embedded
def test_training_rows_read_the_step_verdict_so_a_human_completion_is_a_good_step(db, tmp_path):
    # PRM800K phase 1: step 2's rated alternatives were rejected and a human completion written.
    import_lines(tmp_path, [PHASE1_LINE])
    [row] = label_rows.gather_rows()
    [annotation] = Annotation.objects.all()
    assert row.ratings == (verdicts.verdicts(annotation).ratings,) == ((1, 1),)


@pytest.mark.embedded
def test_training_rows_end_at_the_first_error_and_follow_a_reviewer_override(db, reviewer):
    solution = SolutionFactory(steps=["a", "b", "c"], is_correct=False)
    annotation = annotate(solution, [1, 1, 1])
    assert label_rows.gather_rows()[0].ratings == ((1, 1, 1),)
    # A reviewer overrides step 2 (the chosen completion's rating): training sees it at once,
    # and the finish reason follows the ratings (solution -> found_error), so it is exported too.
    reviewing.override_rating(annotation=annotation, index=1, rating=-1, reviewer=reviewer)
    assert label_rows.gather_rows()[0].ratings == ((1, -1, None),)
    assert [row["label"] for row in exporting.iter_rows(format="processbench", options=ExportOptions())] == [1]


@pytest.mark.embedded
def test_an_annotation_its_finish_reason_contradicts_is_neither_exported_nor_trained_on(db):
    solution = SolutionFactory(steps=["a", "b", "c"], is_correct=False)
    annotate(solution, [1, -1], labeler="consistent")
    contradicted = annotate(solution, [1, -1], labeler="contradicted")
    # Finished as found_error with no step rated -1 (what an edit outside the review could leave).
    Completion.objects.filter(step_label__annotation=contradicted, step_label__index=1).update(rating=0)
    tally = ExportTally()
    assert len(list(exporting.iter_rows(format="soft", options=ExportOptions(), tally=tally))) == 1
    assert tally.skipped == {"inconsistent": 1}
    [row] = label_rows.gather_rows()
    assert row.ratings == ((1, -1, None),)  # the consistent annotation's only


@pytest.mark.embedded
def test_labels_from_a_skewed_selection_are_reweighted_to_the_pool_mix(db, annotator):
    problem = ProblemFactory()
    right = [SolutionFactory(problem=problem, is_correct=True) for _ in range(5)]
    wrong = [SolutionFactory(problem=problem, is_correct=False) for _ in range(5)]
    for solution in right[:1] + wrong:  # selection served 5 wrong answers to 1 right one
        annotate(solution, [1, 1, 1], labeler=f"l{solution.pk}")
    weights = {r.solution_id: r.weight for r in label_rows.gather_rows()}
    assert weights[right[0].pk] == pytest.approx(0.5 / (1 / 6))
    assert weights[wrong[0].pk] == pytest.approx(0.5 / (5 / 6))


# --- the single-run lock --------------------------------------------------------------------------


@pytest.mark.embedded
def test_the_database_refuses_a_second_active_run_in_a_project_and_not_in_another(db):
    gsm8k, math = two_projects()
    TrainingRun.objects.create(project=gsm8k)
    with pytest.raises(IntegrityError), transaction.atomic():
        TrainingRun.objects.create(project=gsm8k, state=JobState.RUNNING)
    TrainingRun.objects.create(project=math, state=JobState.RUNNING)


@pytest.mark.embedded
def test_a_finished_run_must_give_back_the_slot(db):
    with pytest.raises(IntegrityError), transaction.atomic():
        TrainingRun.objects.create(project=here(), state=JobState.SUCCEEDED)  # still holding slot 1


@pytest.mark.embedded
def test_two_concurrent_starts_make_exactly_one_run(transactional_db):
    barrier = threading.Barrier(2)
    outcomes = []

    def start():
        try:
            barrier.wait()
            outcomes.append(retraining.start_training_run(project=here(), options=FAST, enqueue=False).pk)
        except retraining.TrainingAlreadyActive as error:
            outcomes.append(str(error))
        finally:
            connection.close()

    threads = [threading.Thread(target=start) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    runs = list(TrainingRun.objects.all())
    assert len(runs) == 1
    assert sorted(outcomes, key=str) == sorted(
        [runs[0].pk, f"training run #{runs[0].pk} (pending) of default is still active"], key=str
    )


@pytest.mark.embedded
def test_finishing_a_run_frees_the_slot_for_the_next(db):
    first = retraining.start_training_run(project=here(), options=FAST, enqueue=False)
    with pytest.raises(retraining.TrainingAlreadyActive):
        retraining.start_training_run(project=here(), options=FAST, enqueue=False)
    first.fail("stopped")
    second = retraining.start_training_run(project=here(), options=FAST, enqueue=False)
    assert second.active_slot == 1 and TrainingRun.objects.get(pk=first.pk).active_slot is None


@pytest.mark.embedded
def test_two_projects_each_have_a_training_run_pending_at_once(db):
    gsm8k, math = two_projects()
    ours = retraining.start_training_run(project=gsm8k, options=FAST, enqueue=False)
    theirs = retraining.start_training_run(project=math, options=FAST, enqueue=False)
    assert (ours.state, theirs.state) == (JobState.PENDING, JobState.PENDING)
    assert (retraining.active_run(gsm8k), retraining.active_run(math)) == (ours, theirs)
    with pytest.raises(retraining.TrainingAlreadyActive, match=f"#{ours.pk} \\(pending\\) of gsm8k"):
        retraining.start_training_run(project=gsm8k, options=FAST, enqueue=False)


@pytest.mark.embedded
def test_a_run_starts_from_its_projects_current_model_and_counts_its_projects_labels(db):
    gsm8k, math = two_projects()
    ours, theirs = (ModelVersion.objects.create(name=name, path="/x", weights_sha256="0" * 64) for name in "ab")
    registry.set_current_model(ours, project=gsm8k)
    registry.set_current_model(theirs, project=math)
    annotate(solution_in(gsm8k), [1, 1, 1])
    for labeler in ("x", "y"):
        annotate(solution_in(math), [1, -1], labeler=labeler)
    run = retraining.start_training_run(project=gsm8k, options=FAST, enqueue=False)
    assert (run.project, run.parent, run.n_labels) == (gsm8k, ours, 1)
    assert (retraining.new_label_count(gsm8k), retraining.new_label_count(math)) == (0, 2)


@pytest.mark.embedded
def test_a_run_whose_worker_died_is_failed_after_the_time_limit(db):
    run = retraining.start_training_run(project=here(), options=FAST, enqueue=False)
    TrainingRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - dt.timedelta(days=1))
    assert retraining.start_training_run(project=here(), options=FAST, enqueue=False).pk != run.pk
    assert TrainingRun.objects.get(pk=run.pk).state == JobState.FAILED


def test_bad_options_fail_the_start_not_the_worker(db):
    with pytest.raises(ValueError, match="mode='lorax'"):
        retraining.start_training_run(project=here(), options={"train": {"mode": "lorax"}}, enqueue=False)
    with pytest.raises(ValueError, match="gate_metric"):
        retraining.start_training_run(project=here(), options={"gate_metric": "accuracy"}, enqueue=False)
    assert not TrainingRun.objects.exists()


# --- schedule -------------------------------------------------------------------------------------


@pytest.mark.embedded
def test_the_schedule_retrains_only_when_enough_new_labels_exist(db):
    solutions = [SolutionFactory() for _ in range(4)]
    for solution in solutions[:2]:
        annotate(solution, [1, 1, 1], labeler=f"l{solution.pk}")
    project = here().pk
    assert scheduled_retrain_task(min_new_labels=3, project_id=project) is None
    annotate(solutions[2], [1, -1], labeler="x")
    run_id = scheduled_retrain_task(min_new_labels=3, options=FAST, project_id=project)
    run = TrainingRun.objects.get(pk=run_id)
    assert run.trigger == TrainingRun.Trigger.SCHEDULE and run.state == JobState.PENDING
    assert scheduled_retrain_task(min_new_labels=1, project_id=project) is None  # one run at a time
    run.start()
    run.succeed()
    assert retraining.new_label_count(here()) == 0
    assert scheduled_retrain_task(min_new_labels=1, project_id=project) is None  # nothing new since that run
    annotate(solutions[3], [1, 1, 1], labeler="y")
    assert scheduled_retrain_task(min_new_labels=1, project_id=project) is not None


@pytest.mark.embedded
def test_the_schedule_retrains_each_project_on_its_own_labels(db):
    gsm8k, math = two_projects()
    for labeler in ("x", "y"):
        annotate(solution_in(math), [1, 1, 1], labeler=labeler)
    assert scheduled_retrain_task(min_new_labels=2, project_id=gsm8k.pk) is None
    run = TrainingRun.objects.get(pk=scheduled_retrain_task(min_new_labels=2, project_id=math.pk))
    assert run.project == math and run.n_labels == 2


@pytest.mark.embedded
def test_the_sites_schedule_covers_every_project_without_a_schedule_of_its_own(db):
    gsm8k, math = two_projects()
    assert retraining.projects_on_the_shared_schedule() == [p.pk for p in Project.objects.order_by("pk")]
    retraining.ensure_schedule(project=math, every_minutes=5, min_new_labels=500)
    assert math.pk not in retraining.projects_on_the_shared_schedule()
    assert gsm8k.pk in retraining.projects_on_the_shared_schedule()


@pytest.mark.embedded
def test_ensure_schedule_creates_the_projects_periodic_task_once_and_keeps_admin_edits(db):
    name = retraining.schedule_name(here())
    task = retraining.ensure_schedule(project=here(), every_minutes=15, min_new_labels=20)
    assert task.task == "scoring.tasks.scheduled_retrain_task" and task.queue == "ml"
    assert json.loads(task.kwargs) == {"project_id": here().pk, "min_new_labels": 20}
    edited = json.dumps({"project_id": here().pk, "min_new_labels": 5})
    PeriodicTask.objects.filter(pk=task.pk).update(kwargs=edited)
    again = retraining.ensure_schedule(project=here(), every_minutes=15, min_new_labels=20)
    assert again.pk == task.pk and PeriodicTask.objects.filter(name=name).count() == 1
    assert again.kwargs == edited


@pytest.mark.embedded
def test_the_data_migration_installs_the_same_schedule_once(db):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("scoring.migrations.0004_tr_retrain_schedule")
    PeriodicTask.objects.filter(name=retraining.SCHEDULE_NAME).delete()
    migration.create_schedule(apps, None)
    migration.create_schedule(apps, None)
    task = PeriodicTask.objects.get(name=retraining.SCHEDULE_NAME)
    assert task.task == retraining.SCHEDULE_TASK and task.enabled and task.interval.every == 30
    assert "project_id" not in json.loads(task.kwargs)  # the site's: one task per project


# --- runs, the gate and promotion -----------------------------------------------------------------


def test_a_first_retrain_on_a_few_held_out_solutions_ends_with_not_enough_evidence(
    constant_current, annotator, client, admin_user
):
    make_pool()
    label_everything(annotator)
    run = retraining.run_training(run_id=retraining.start_training_run(project=here(), options=FAST, enqueue=False).pk)
    assert run.state == JobState.SUCCEEDED and run.active_slot is None
    gate = run.gate
    assert gate["outcome"] == "not_enough_evidence" and gate["promoted"] is False
    assert gate["new"] > 0.5 == gate["current"]  # better on its face, as "1.00 vs 0.50" was
    assert 0 < gate["n_solutions"] < 50 and gate["n_steps"] < 200 and gate["more_labels_needed"] > 0
    assert run.result.status == ModelVersion.Status.NOT_ENOUGH_EVIDENCE and run.result.state == "not enough evidence"
    assert registry.current_model(here()) == constant_current and not RescoreJob.objects.exists()
    assert "-> not_enough_evidence" in run.log
    client.force_login(admin_user)
    page = client.get(reverse("scoring:training-run", args=[run.pk])).content.decode()
    assert f"on {gate['n_solutions']} held-out labeled solutions with {gate['n_steps']} labeled steps" in page
    assert f"about {gate['more_labels_needed']} more labeled solutions in all" in page
    runs_page = client.get(reverse("scoring:training-runs")).content.decode()
    assert f"about {gate['more_labels_needed']} more labeled solutions needed" in runs_page


def test_a_gate_short_of_held_out_labels_says_so_without_scoring_best_of_n(constant_current, annotator):
    """The counts decide before any model is run: the held-out candidates' best-of-N, minutes on
    a real pool, is never scored when the outcome can only be "not enough evidence"."""
    make_pool()
    label_everything(annotator)
    run = retraining.run_training(run_id=retraining.start_training_run(options=FAST, enqueue=False).pk)
    gate = run.gate
    assert gate["outcome"] == "not_enough_evidence" and 0 < gate["n_solutions"] < 50
    metrics = run.result.metrics
    assert metrics["eval"]["best_of_n"] is None and metrics["compared_eval"]["best_of_n"] is None
    assert metrics["eval"]["n_solutions"] == gate["n_solutions"]  # measured on the labeled ones alone
    assert f"{gate['n_solutions']} held-out labeled solutions with {gate['n_steps']} labeled steps; the gate " \
           f"needs 50 and 200: not enough evidence" in run.log
    assert "problems for best-of-N" not in run.log


def test_a_model_not_better_by_the_demanded_margin_is_registered_but_not_promoted(
    lenient_gate, constant_current, annotator
):
    make_pool()
    label_everything(annotator)
    run = retraining.start_training_run(project=here(), options=FAST | {"tolerance": -0.6}, enqueue=False)
    run = retraining.run_training(run_id=run.pk)
    assert run.state == JobState.SUCCEEDED and run.active_slot is None
    assert run.gate["promoted"] is False and run.gate["current"] == 0.5, run.log
    assert run.gate["outcome"] == "rejected", run.log
    assert run.gate["interval"][0] <= 0.6  # an AUC gain cannot clear 0.6 over 0.5
    assert run.result.status == ModelVersion.Status.REJECTED
    assert registry.current_model(here()) == constant_current
    assert not RescoreJob.objects.exists()
    assert run.loss_curve and "gate on step_auc" in run.log
    # A rerun of the same (finished) run does nothing.
    assert retraining.run_training(run_id=run.pk).result == run.result
    assert ModelVersion.objects.count() == 2


def test_a_failed_run_frees_the_slot_and_says_why(constant_current):
    # No labels at all: the run fails with a clear message.
    SolutionFactory()
    run = retraining.start_training_run(project=here(), options=FAST, enqueue=False)
    with pytest.raises(ValueError, match="no labeled steps"):
        retraining.run_training(run_id=run.pk)
    run.refresh_from_db()
    assert run.state == JobState.FAILED and "no labeled steps" in run.error and run.active_slot is None
    assert retraining.start_training_run(project=here(), options=FAST, enqueue=False).active_slot == 1


def test_a_failure_in_evaluation_ends_the_run_failed_with_its_message_and_frees_the_slot(constant_current, annotator):
    make_pool()
    label_everything(annotator)
    # The current model's files change on disk after training started: the gate, which
    # measures the current model, must refuse it, and the run must not stay running.
    head = constant_current.path + "/head.safetensors"
    run = retraining.start_training_run(project=here(), options=FAST, enqueue=False)
    with open(head, "ab") as handle:
        handle.write(b"tampered")
    with pytest.raises(registry.ModelIntegrityError):
        retraining.run_training(run_id=run.pk)
    run.refresh_from_db()
    assert run.state == JobState.FAILED and run.active_slot is None and run.finished_at is not None
    assert run.error.startswith("ModelIntegrityError: model 'constant'") and "failed: ModelIntegrityError" in run.log
    assert retraining.start_training_run(project=here(), options=FAST, enqueue=False).active_slot == 1


def test_a_redelivered_task_never_reruns_a_run_an_earlier_attempt_left_running(db):
    run = retraining.start_training_run(project=here(), options=FAST, enqueue=False)
    assert run.start()  # the first attempt claimed it, then its worker vanished
    assert retraining.run_training(run_id=run.pk).state == JobState.RUNNING  # not resumable: left alone
    assert not ModelVersion.objects.exists()


# --- a run whose worker died after registering its version -------------------------------------


def first_attempt_killed(run: TrainingRun, *, after_gate: bool = False) -> ModelVersion:
    """What the worker's `run_training` does with the run up to registering its version (and,
    with `after_gate`, gating it), before its process is killed."""
    assert run.start()
    options, examples = retraining.run_inputs(run)
    version = retraining.train_and_register(run, options=options, examples=examples)
    if after_gate:
        promotion.evaluate_and_gate(run, version, examples=examples, options=options, log=print)
    heartbeats.release_all()  # its process is gone: nothing beats the run any more,
    TrainingRun.objects.filter(pk=run.pk).update(claimed_by=DEAD)  # and its pid names no process
    return version


def restart(run: TrainingRun) -> TrainingRun:
    """A worker is back: the reconciler puts the run back to pending and resends its task, run here."""
    assert f"TrainingRun:{run.pk}" in recovery.reconcile(pending_after=0)
    lose_broker_messages()  # no worker in this process: the task's call follows
    return retraining.run_training(run_id=run.pk)


def test_a_run_killed_after_registering_its_version_goes_on_from_that_version_on_restart(
    lenient_gate, constant_current, annotator
):
    make_pool()
    label_everything(annotator)
    run = retraining.start_training_run(project=here(), options=FAST, enqueue=False)
    version = first_attempt_killed(run)
    assert TrainingRun.objects.get(pk=run.pk).state == JobState.RUNNING
    assert version.status == ModelVersion.Status.CANDIDATE and not RescoreJob.objects.exists()

    run = restart(run)
    assert run.state == JobState.SUCCEEDED and run.active_slot is None, run.error + run.log
    assert run.result == version and ModelVersion.objects.count() == 2  # registered once, not failed on its name
    assert run.log.count(f"registered {version.name}") == 1 and f"resumed: {version.name} was registered" in run.log
    # Evaluated and gated as an uninterrupted run is: on the split recorded with the version.
    split = ModelVersion.objects.get(pk=version.pk).metrics["split"]
    assert split["val_problem_ids"] and not set(split["val_problem_ids"]) & set(split["train_problem_ids"])
    assert run.gate["promoted"] and run.gate["new"] > 0.5 == run.gate["current"]
    assert registry.current_model(here()) == version
    assert RescoreJob.objects.filter(model_version=version).count() == 1


def test_a_run_killed_after_promoting_its_version_is_finished_without_a_second_gate_or_rescore(
    lenient_gate, constant_current, annotator
):
    make_pool()
    label_everything(annotator)
    run = retraining.start_training_run(project=here(), options=FAST, enqueue=False)
    version = first_attempt_killed(run, after_gate=True)
    assert registry.current_model(here()) == version and RescoreJob.objects.count() == 1

    run = restart(run)
    assert run.state == JobState.SUCCEEDED, run.error + run.log
    assert f"resumed: {version.name} was already promoted" in run.log
    assert run.gate["current_version"] == constant_current.name  # the first attempt's decision stands
    assert RescoreJob.objects.count() == 1 and ModelVersion.objects.count() == 2


@pytest.mark.slow
@pytest.mark.postgresql
def test_a_worker_killed_between_registering_and_gating_is_followed_by_one_that_finishes_the_run(
    lenient_gate, constant_current, worker_factory  # noqa: F811
):
    make_pool()
    label_everything(user_with_role("trainer-ann", "annotator"))
    worker = worker_factory()
    run = retraining.start_training_run(project=here(), options=FAST)  # queued on ml, run by the real worker
    wait_for(lambda: TrainingRun.objects.filter(pk=run.pk, result__isnull=False).exists(), timeout=240, interval=0.02)
    with transaction.atomic():
        # Holding the run's row stops the worker at its next write to it (its log, right after
        # registering, or before the gate): the kill lands between registering and promoting.
        TrainingRun.objects.select_for_update().get(pk=run.pk)
        worker.kill()
        assert registry.current_model(here()) == constant_current, "the gate ran before the kill"
    assert TrainingRun.objects.get(pk=run.pk).state == JobState.RUNNING

    worker_factory()  # its start finds the dead holder, puts the run back to pending and resends it
    wait_for(lambda: TrainingRun.objects.get(pk=run.pk).state in (JobState.SUCCEEDED, JobState.FAILED), timeout=240)
    run.refresh_from_db()
    assert run.state == JobState.SUCCEEDED, run.error + run.log
    assert "resumed: " in run.log and ModelVersion.objects.count() == 2
    assert registry.current_model(here()) == run.result and run.gate["promoted"]
    wait_for(lambda: RescoreJob.objects.filter(model_version=run.result, state=JobState.SUCCEEDED).exists(),
             timeout=120)
    assert RescoreJob.objects.count() == 1


@pytest.mark.slow
@pytest.mark.embedded
def test_labels_train_a_model_that_is_promoted_and_rescores_the_pool(
    lenient_gate, constant_current, celery_worker_process
):
    make_pool()
    annotator = user_with_role("trainer-ann", "annotator")
    assert label_everything(annotator) == 48
    run = retraining.start_training_run(project=here(), options=FAST)  # queued on ml, run by the real worker
    wait_for(lambda: TrainingRun.objects.get(pk=run.pk).state in (JobState.SUCCEEDED, JobState.FAILED), timeout=180)
    run.refresh_from_db()
    assert run.state == JobState.SUCCEEDED, run.error + run.log
    new = run.result
    assert run.gate["promoted"] and run.gate["new"] > 0.5 == run.gate["current"]
    assert registry.current_model(here()) == new and new.parent == constant_current
    assert new.metrics["eval"]["best_of_n"]["by_n"]["1"]["problems"] >= 1
    assert new.metrics["compared_eval"]["step_auc"] == 0.5
    # Promotion started a rescore by the new model, then a new queue generation.
    job = wait_for(lambda: RescoreJob.objects.filter(model_version=new, state=JobState.SUCCEEDED).first(), timeout=120)
    assert SolutionScore.objects.filter(model_version=new).count() == 48
    assert Generation.objects.filter(number=job.generation, model_version_name=new.name).exists()
    wrong_steps = SolutionScore.objects.filter(model_version=new, solution__is_correct=False)
    right_steps = SolutionScore.objects.filter(model_version=new, solution__is_correct=True)
    assert max(s.min for s in wrong_steps) < max(s.min for s in right_steps)


# --- model memory ---------------------------------------------------------------------------------


def test_loading_more_versions_than_the_cache_size_keeps_that_many_on_one_shared_backbone(db, tmp_path, settings):
    settings.STEPWISE_MODEL_CACHE_SIZE = 2
    backbone = build_tiny_backbone(tmp_path / "backbone")
    versions = []
    for i in range(4):  # four head-only versions on one backbone, as four retrains make
        torch.manual_seed(i)
        folder = save_head_model(
            tmp_path / f"v{i}", head=StepHead(32, "point"), backbone=str(backbone.resolve()), layer=1
        )
        versions.append(registry.register_model_version(name=f"v{i}", path=folder))
    loaded = [registry.load(version) for version in versions]
    assert registry.cached_fingerprints() == [v.weights_sha256 for v in versions[2:]]
    assert all(model.model is loaded[0].model for model in loaded)  # one backbone in memory, not four
    assert len({id(model.head) for model in loaded}) == 4
    assert registry.load(versions[3]) is loaded[3]  # a hit: nothing reloaded
    registry.load(versions[0])  # loaded again, verified again; the least recently used goes
    assert registry.cached_fingerprints() == [versions[3].weights_sha256, versions[0].weights_sha256]


# --- pages ----------------------------------------------------------------------------------------


@pytest.mark.embedded
def test_training_pages_are_for_admins_only(client, annotator):
    url = reverse("scoring:training-runs")
    assert client.get(url).status_code == 302  # to the login page
    client.force_login(annotator)
    assert client.get(url).status_code == 403
    data = {"head": "point", "mode": "head", "epochs": 3, "gate_metric": "step_auc"}
    assert client.post(url, data).status_code == 403
    assert not TrainingRun.objects.exists()


@pytest.mark.embedded
def test_admin_starts_a_run_and_a_second_start_is_refused(client, admin_user):
    client.force_login(admin_user)
    form = {"head": "beta", "mode": "head", "epochs": 3, "gate_metric": "processbench_f1"}
    response = client.post(reverse("scoring:training-runs"), form)
    run = TrainingRun.objects.get()
    assert response.status_code == 302 and response.url == reverse("scoring:training-run", args=[run.pk])
    assert run.config["train"]["head"] == "beta" and run.config["gate_metric"] == "processbench_f1"
    response = client.post(reverse("scoring:training-runs"), form, follow=True)
    assert TrainingRun.objects.count() == 1
    assert f"training run #{run.pk} (pending) of default is still active" in response.content.decode()


@pytest.mark.embedded
def test_run_page_polls_a_partial_with_the_loss_curve_until_finished(client, admin_user):
    run = TrainingRun.objects.create(state=JobState.RUNNING, done=2, total=4, log="epoch 1\n",
                                     loss_curve=[{"epoch": 1, "train_loss": 0.7, "val_loss": 0.8},
                                                 {"epoch": 2, "train_loss": 0.5, "val_loss": 0.6}])
    client.force_login(admin_user)
    url = reverse("scoring:training-run", args=[run.pk])
    page = client.get(url).content.decode()
    assert url == f"/models/jobs/training/{run.pk}/"
    assert "<html" in page and 'hx-trigger="every 1s"' in page and "<polyline" in page
    partial = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in partial and 'id="job-progress"' in partial and 'value="50"' in partial
    assert "epoch 1" in partial  # the log, in the training extras
    run.succeed()
    assert "hx-trigger" not in client.get(url, headers={"HX-Request": "true"}).content.decode()


@pytest.mark.embedded
def test_evaluation_page_shows_the_version_next_to_the_previous_one(client, admin_user):
    samples = [evaluation.LabeledSample(1, [0.9, 0.2], [1, 0], 1), evaluation.LabeledSample(2, [0.7, 0.6], [1, 1], -1)]
    worse = [evaluation.LabeledSample(1, [0.5, 0.6], [1, 0], 1), evaluation.LabeledSample(2, [0.7, 0.6], [1, 1], -1)]
    problems = [[evaluation.Candidate([0.9], True, "1"), evaluation.Candidate([0.2], False, "2")]]
    version = ModelVersion.objects.create(name="run7-beta-head", path="/x", weights_sha256="0" * 64, metrics={
        "eval": evaluation.evaluate(samples, problems), "compared_with": "old-model",
        "compared_eval": evaluation.evaluate(worse, problems),
        "gate": {"metric": "step_auc", "new": 1.0, "current": 0.5, "promoted": True}})
    client.force_login(admin_user)
    page = client.get(reverse("scoring:evaluation", args=[version.pk])).content.decode()
    assert "run7-beta-head" in page and "old-model" in page
    assert "Reliability diagram" in page and page.count("<svg") == 2
    assert "1.0000" in page and "0.5000" in page  # step AUC of each


# --- commands -------------------------------------------------------------------------------------


def test_train_prm_inline_then_eval_prm_json(constant_current, annotator, capsys):
    import json

    from django.core.management import call_command

    make_pool()
    label_everything(annotator)
    call_command("train_prm", "--inline", "--head", "beta", "--epochs", "40", "--set", "lr=0.03",
                 "--set", "val_fraction=0.25")
    out = capsys.readouterr().out
    run = TrainingRun.objects.get()
    assert f"run {run.pk} succeeded" in out and run.config["train"]["head"] == "beta"
    assert run.result.config["head"]["type"] == "beta"
    call_command("eval_prm", "--model", run.result.name, "--json", "--val-fraction", "0.25")
    report = json.loads(capsys.readouterr().out)
    assert report["model"] == run.result.name
    assert report["step_auc"] == pytest.approx(run.result.metrics["eval"]["step_auc"])


def test_train_prm_refuses_bad_options_and_a_second_run(db):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="unknown training option"):
        call_command("train_prm", "--set", "epoch=3")
    retraining.start_training_run(project=here(), options=FAST, enqueue=False)
    with pytest.raises(CommandError, match="still active"):
        call_command("train_prm")


def test_without_measurable_held_out_labels_the_current_model_stays():
    all_good = [evaluation.LabeledSample(p, [0.7, 0.7], [1, 1], None) for p in range(100)]
    decision = promotion.gate(new=all_good, current=all_good, metric="step_auc",
                              evidence=promotion.Evidence(min_solutions=1, min_steps=1))
    assert decision["promoted"] is False and "cannot be measured" in decision["reason"]
    assert promotion.gate(new=all_good, current=None, metric="step_auc", evidence=promotion.Evidence())["promoted"]
