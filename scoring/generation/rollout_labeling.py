"""Automatic step labels by rollouts, Django side: solutions -> RolloutLabelJob -> AutoStepLabels.

The rollouts themselves are plain functions (`scoring.generation.rollouts`); this module picks the
solutions, runs them through a generator in a resumable job and stores one AutoStepLabel per
step in the job's AutoLabelRun, apart from human labels. Each solution is written in one
transaction together with what it cost (the run's rollouts and tokens, the job's full-sweep
figure), under a lock on the run row, and a solution that already has labels in the run is
skipped: a worker killed mid-run, a redelivered task or a duplicate leaves neither gaps nor
duplicates nor double counts.

Long runs are chunks (`labeling_jobs.work_in_chunks`), as every labeling job's.
"""
from __future__ import annotations

from dataclasses import replace

from django.db import transaction
from django.db.models import F

from annotate.models import AutoLabelRun, AutoStepLabel, Project, Solution
from scoring.generation import rollouts
from scoring.generation.generators import DEFAULT_PROMPT_TEMPLATE, DEFAULT_STEP_DELIMITER, Generator, SamplingParams
from scoring.generation.labeling_jobs import (
    CHUNK_SECONDS,
    choose_solutions,
    describe_spec,
    labelable_solutions,
    resolve_spec,
    run_labeling_job,
    solution_params,
)
from scoring.models import RolloutLabelJob

# --- choosing solutions and starting a job ----------------------------------------------------------


def eligible_solutions(*, project: Project, source: str | None = None, unlabeled: bool = False):
    """The project's solutions rollouts can label: with steps and a known answer; not references or gold items."""
    solutions = labelable_solutions(project=project).exclude(
        problem__ground_truth_answer__isnull=True).exclude(problem__ground_truth_answer="")
    if source:
        solutions = solutions.filter(source=source)
    if unlabeled:
        solutions = solutions.unlabeled()
    return solutions.order_by("pk")


def start_rollout_labeling(
    *, project: Project | None = None, method: str, n: int, solution_ids=None, source: str | None = None,
    unlabeled: bool = False,
    limit: int | None = None, generator_spec: dict | None = None, params: SamplingParams | None = None,
    template: str = DEFAULT_PROMPT_TEMPLATE, delimiter: str = DEFAULT_STEP_DELIMITER, created_by=None,
    enqueue: bool = True,
) -> RolloutLabelJob:
    """A pending job of the project labeling the eligible solutions of the project the filter
    selects (`eligible_solutions`), into a new AutoLabelRun of the project.

    Solutions asked for by id but not eligible (no steps, no known answer) are counted as skipped.
    """
    project = Project.objects.given(project)
    if method not in rollouts.METHODS:
        raise ValueError(f"method={method!r}; expected one of {', '.join(rollouts.METHODS)}")
    sampling = replace(params or SamplingParams(), n=n, stop=())  # a rollout runs to the end of the solution
    spec = resolve_spec(generator_spec)
    chosen, skipped = choose_solutions(eligible_solutions(project=project, source=source, unlabeled=unlabeled),
                                       solution_ids=solution_ids, limit=limit)
    with transaction.atomic():
        run = AutoLabelRun.objects.create(project=project, method=method, source=describe_spec(spec), params={
            "n": n, "sampling": sampling.as_dict(), "template": template, "delimiter": delimiter, "generator": spec,
        })
        job = RolloutLabelJob.objects.create(project=project, run=run, generator_spec=spec, solution_ids=chosen,
                                             total=len(chosen), skipped=skipped,
                                             created_by=created_by)
    if enqueue:
        transaction.on_commit(job.send_task)
    return job


# --- running a job -------------------------------------------------------------------------------------


def run_rollout_job(*, job_id: int, chunk_seconds: float = CHUNK_SECONDS, resend: bool = True) -> RolloutLabelJob:
    """Label the job's solutions not labeled yet, for about `chunk_seconds`; idempotent.

    Returns the job: succeeded when every solution is labeled, or pending again when the
    chunk's time ran out first (at least one solution is labeled per chunk), its task sent
    again unless `resend` is False (the caller goes on in-process).
    """
    job = RolloutLabelJob.objects.select_related("run").get(pk=job_id)
    return run_labeling_job(job, todo=lambda: remaining_solutions(job), done=lambda: labeled_count(job),
                            work=lambda solution, generator: label_solution(job=job, solution=solution,
                                                                            generator=generator),
                            chunk_seconds=chunk_seconds, resend=resend)


def labeled_solution_ids(run: AutoLabelRun) -> set[int]:
    return set(AutoStepLabel.objects.filter(run=run).values_list("step__solution_id", flat=True).distinct())


def labeled_count(job: RolloutLabelJob) -> int:
    return len(labeled_solution_ids(job.run) & set(job.solution_ids))


def remaining_solutions(job: RolloutLabelJob):
    done = labeled_solution_ids(job.run)
    todo = [pk for pk in job.solution_ids if pk not in done]
    return Solution.objects.filter(pk__in=todo).select_related("problem").prefetch_related("steps").order_by("pk")


def label_solution(*, job: RolloutLabelJob, solution: Solution, generator: Generator) -> bool:
    """Roll out one solution and store its labels with their cost; False if it was labeled already."""
    run = job.run
    steps = sorted(solution.steps.all(), key=lambda step: step.index)
    answer = solution.problem.ground_truth_answer
    assert answer is not None  # the job holds eligible solutions only: their problem has a known answer
    task = rollouts.RolloutTask(problem=solution.problem.statement, answer=answer,
                                steps=tuple(s.text for s in steps), template=run.params["template"],
                                delimiter=run.params["delimiter"])
    result = rollouts.label_steps(run.method, task, generator, solution_params(run, solution))
    with transaction.atomic():
        # The run row is the lock: two attempts at one solution write it once, in turn.
        AutoLabelRun.objects.select_for_update().filter(pk=run.pk).get()
        if AutoStepLabel.objects.filter(run=run, step__solution=solution).exists():
            return False
        AutoStepLabel.objects.bulk_create([
            AutoStepLabel(run=run, step=step, soft=estimate.soft, n_rollouts=estimate.n_rollouts,
                          n_correct=estimate.n_correct)
            for step, estimate in zip(steps, result.steps)
        ])
        AutoLabelRun.objects.filter(pk=run.pk).update(rollouts=F("rollouts") + result.rollouts,
                                                      tokens=F("tokens") + result.tokens)
        RolloutLabelJob.objects.filter(pk=job.pk).update(
            full_sweep_rollouts=F("full_sweep_rollouts") + result.full_sweep_rollouts)
    return True

