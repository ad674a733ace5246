"""Rollout labeling jobs (scoring.generation.rollout_labeling, label_rollouts): stored labels, provenance, resume."""
import itertools

import pytest
from django.core.management import CommandError, call_command

from annotate.models import AutoLabelRun, AutoStepLabel, Project, Step
from bench.tiny import build_tiny_generator
from jobs.states import JobState
from scoring.generation import labeling_jobs, rollout_labeling
from scoring.generation.generators import SamplingParams
from scoring.models import RolloutLabelJob
from tests.conftest import WorkerProcess, wait_for
from tests.factories import ProblemFactory, SolutionFactory
from tests.scoring.projects import solution_in, two_projects

PARAMS = SamplingParams(n=3, max_tokens=8, seed=0)
PROBLEM_NUMBERS = itertools.count()


@pytest.fixture(scope="module")
def silent_folder(tmp_path_factory):
    """A tiny LM that ends every completion at once: a rollout's answer is its prefix's own."""
    return build_tiny_generator(tmp_path_factory.mktemp("silent"), ends_at_once=True)


@pytest.fixture(scope="module")
def babbler_folder(tmp_path_factory):
    return build_tiny_generator(tmp_path_factory.mktemp("babbler"))


def solution_claiming(*answers, truth="7", **fields):
    problem = ProblemFactory(statement=f"What is 3 + 4? (problem {next(PROBLEM_NUMBERS)})", ground_truth_answer=truth)
    return SolutionFactory(problem=problem, steps=[f"Step {i}: so the answer is {a}" for i, a in enumerate(answers)],
                           **fields)


def run_inline(job):
    while rollout_labeling.run_rollout_job(job_id=job.pk, resend=False).state == JobState.PENDING:
        pass
    return RolloutLabelJob.objects.select_related("run").get(pk=job.pk)


def labels_of(run, solution):
    rows = AutoStepLabel.objects.filter(run=run, step__solution=solution).order_by("step__index")
    return [(label.n_correct, label.n_rollouts, label.soft) for label in rows]


@pytest.mark.django_db
def test_math_shepherd_job_stores_k_of_n_for_every_step_with_its_provenance_and_cost(silent_folder):
    good, bad = solution_claiming(7, 7), solution_claiming(7, 8, 8)
    job = rollout_labeling.start_rollout_labeling(
        project=Project.objects.sole(),
        method="math_shepherd", n=3, solution_ids=[good.pk, bad.pk], params=PARAMS, enqueue=False,
        generator_spec={"backend": "local", "model": str(silent_folder), "device": "cpu"})
    job = run_inline(job)
    assert job.state == JobState.SUCCEEDED and job.done == job.total == 2
    run = job.run
    assert labels_of(run, good) == [(3, 3, 1.0), (3, 3, 1.0)]
    assert labels_of(run, bad) == [(3, 3, 1.0), (0, 3, 0.0), (0, 3, 0.0)]
    assert run.rollouts == job.full_sweep_rollouts == 5 * 3
    assert run.params["n"] == 3 and run.params["generator"]["model"] == str(silent_folder)
    assert run.params["sampling"]["seed"] == 0 and "{problem}" in run.params["template"]
    assert run.source == f"local:{silent_folder.name}"


@pytest.mark.django_db
def test_omegaprm_job_stores_measured_counts_and_inferred_verdicts_and_spends_less(silent_folder):
    solution = solution_claiming(*([7] * 5 + [9] * 3))
    job = run_inline(rollout_labeling.start_rollout_labeling(
        project=Project.objects.sole(),
        method="omegaprm", n=3, solution_ids=[solution.pk], params=PARAMS, enqueue=False,
        generator_spec={"backend": "local", "model": str(silent_folder), "device": "cpu"}))
    labels = labels_of(job.run, solution)
    assert [soft for _, _, soft in labels] == [1.0] * 5 + [0.0] * 3
    measured = [label for label in labels if label[1] is not None]
    assert 0 < len(measured) < len(labels)
    assert job.run.rollouts == 3 * len(measured) < job.full_sweep_rollouts == 8 * 3


@pytest.mark.django_db
def test_solutions_without_a_known_answer_or_steps_are_skipped_and_counted(silent_folder):
    unknown = solution_claiming(7, truth="")
    stepless = SolutionFactory(steps=[])
    labeled = solution_claiming(7)
    job = rollout_labeling.start_rollout_labeling(
        project=Project.objects.sole(),
        method="math_shepherd", n=2, solution_ids=[unknown.pk, stepless.pk, labeled.pk], enqueue=False,
        generator_spec={"backend": "local", "model": str(silent_folder)})
    assert (job.solution_ids, job.skipped, job.total) == ([labeled.pk], 2, 1)


@pytest.mark.django_db
def test_a_rerun_and_chunked_runs_label_each_solution_once_and_count_its_cost_once(silent_folder):
    solutions = [solution_claiming(7, 8) for _ in range(3)]
    job = rollout_labeling.start_rollout_labeling(
        project=Project.objects.sole(),
        method="math_shepherd", n=2, solution_ids=[s.pk for s in solutions], params=PARAMS, enqueue=False,
        generator_spec={"backend": "local", "model": str(silent_folder)})
    first = rollout_labeling.run_rollout_job(job_id=job.pk, chunk_seconds=0, resend=False)
    assert first.state == JobState.PENDING and first.done == 1  # one solution per zero-second chunk
    job = run_inline(job)
    rollout_labeling.label_solution(job=job, solution=solutions[0], generator=labeling_jobs.load_generator(
        job.generator_spec))  # a duplicate attempt (a redelivered task) writes nothing
    assert AutoStepLabel.objects.filter(run=job.run).count() == 6
    run = AutoLabelRun.objects.get(pk=job.run_id)
    assert run.rollouts == sum(label.n_rollouts for label in AutoStepLabel.objects.filter(run=run)) == 12
    assert RolloutLabelJob.objects.get(pk=job.pk).full_sweep_rollouts == 12


@pytest.mark.django_db
def test_label_rollouts_command_labels_inline_and_reports_the_saving(silent_folder):
    solution_claiming(*([7] * 4 + [9] * 3), source="rollout-test")
    solution_claiming(7, source="elsewhere")
    out = call_command_output("label_rollouts", "--method", "omegaprm", "--n", "2", "--source", "rollout-test",
                              "--generator", str(silent_folder), "--inline")
    assert "1 solutions to label" in out and "saved)" in out
    run = AutoLabelRun.objects.get()
    assert run.method == "omegaprm" and run.labels.count() == 7


def test_label_rollouts_command_names_a_bad_option(db):
    with pytest.raises(CommandError, match="--solution-ids 'x,1'"):
        call_command("label_rollouts", "--solution-ids", "x,1", "--inline")
    with pytest.raises(CommandError, match="--generator: not valid JSON"):
        call_command("label_rollouts", "--generator", "{nope", "--inline")


def call_command_output(*args) -> str:
    import io

    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.worker
def test_a_worker_killed_mid_job_resumes_it_without_gaps_or_duplicates(transactional_db, tmp_path, babbler_folder):
    # Enough work that the kill lands mid-job even on an idle machine (3 solutions could finish first).
    solutions = [solution_claiming(7, 8) for _ in range(40)]
    job = rollout_labeling.start_rollout_labeling(
        project=Project.objects.sole(),
        method="math_shepherd", n=2, solution_ids=[s.pk for s in solutions],
        params=SamplingParams(n=2, max_tokens=48, seed=1),
        generator_spec={"backend": "local", "model": str(babbler_folder), "device": "cpu", "batch_size": 4})
    worker = WorkerProcess(tmp_path / "worker.log")
    worker.start()
    try:
        wait_for(lambda: RolloutLabelJob.objects.get(pk=job.pk).done >= 1, timeout=90)
        worker.kill()
        killed = RolloutLabelJob.objects.get(pk=job.pk)
        assert killed.state == JobState.RUNNING and killed.done < killed.total
        worker = WorkerProcess(tmp_path / "worker-2.log")
        worker.start()  # the reconciler resends the task of the job whose holder died
        wait_for(lambda: RolloutLabelJob.objects.get(pk=job.pk).state == JobState.SUCCEEDED, timeout=120)
    finally:
        worker.stop()
    labels = AutoStepLabel.objects.filter(run=job.run)
    assert sorted(labels.values_list("step_id", flat=True)) == sorted(
        Step.objects.filter(solution__in=solutions).values_list("pk", flat=True))
    run = AutoLabelRun.objects.get(pk=job.run_id)
    assert run.rollouts == sum(label.n_rollouts for label in labels) == len(solutions) * 2 * 2


@pytest.mark.django_db
def test_a_job_labels_its_projects_solutions_only_into_a_run_of_its_project(silent_folder):
    gsm8k, math = two_projects()
    ours = solution_in(gsm8k, steps=["Step 0: so the answer is 7"])
    theirs = solution_in(math, steps=["Step 0: so the answer is 7"])
    job = rollout_labeling.start_rollout_labeling(
        project=gsm8k, method="math_shepherd", n=2, solution_ids=[ours.pk, theirs.pk], enqueue=False,
        generator_spec={"backend": "local", "model": str(silent_folder)})
    assert (job.solution_ids, job.skipped) == ([ours.pk], 1)
    assert job.project == job.run.project == gsm8k
    assert list(rollout_labeling.eligible_solutions(project=math)) == [theirs]
