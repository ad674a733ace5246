"""Judge labels, Django side: solutions -> JudgeLabelJob -> a JudgeAnswer per solution and AutoStepLabels.

The prompt and the reading of an answer are plain functions (`scoring.generation.judging`); this
module picks the solutions, asks the judge (any generator: an OpenAI-compatible server or a local
model) in a resumable job and stores, per solution and in one transaction under a lock on the run
row, the raw answer (parsed or not, with why not), one AutoStepLabel per judged step (its
probability and critique) and the tokens it cost. A solution already answered in the run is
skipped: a worker killed mid-run, a redelivered task or a duplicate leaves neither gaps nor
duplicates nor double counts. Long runs are chunks (`labeling_jobs.work_in_chunks`).

Every call is bounded by the generator: a deadline per request (`timeout`), the answer's size
(`max_tokens`, and the OpenAI client's MAX_ANSWER_BYTES) and retries (its RetryPolicy). A call that
still fails is the solution's answer: stored unparseable with the error, and the job goes on.
"""
from __future__ import annotations

import logging
from dataclasses import replace

from django.conf import settings
from django.db import transaction
from django.db.models import F

from annotate.models import AutoLabelRun, AutoStepLabel, JudgeAnswer, Project, Solution
from scoring.generation import judging
from scoring.generation.generators import Generator, Sample, SamplingParams
from scoring.generation.labeling_jobs import (
    CHUNK_SECONDS,
    choose_solutions,
    describe_spec,
    labelable_solutions,
    resolve_spec,
    run_labeling_job,
    solution_params,
)
from scoring.models import JudgeLabelJob
from steps import rendering, verification

logger = logging.getLogger(__name__)
# A verification chain per step takes room: ThinkPRM's run to thousands of tokens.
DEFAULT_PARAMS = SamplingParams(temperature=0.0, top_p=1.0, max_tokens=1024)


# --- choosing solutions and starting a job ----------------------------------------------------------


def eligible_solutions(*, project: Project):
    """The project's solutions a judge can label: with steps; not references or gold items (no known
    answer needed: the judge reads the steps themselves)."""
    return labelable_solutions(project=project).order_by("pk")


def judge_template() -> str:
    """The prompt template new runs use: STEPWISE_JUDGE_PROMPT, else the built-in ThinkPRM-style one."""
    return verification.check_template(settings.STEPWISE_JUDGE_PROMPT or verification.DEFAULT_TEMPLATE)


def start_judge_labeling(
    *, project: Project | None = None, solution_ids=None, limit: int | None = None,
    generator_spec: dict | None = None, params: SamplingParams | None = None, template: str | None = None,
    created_by=None, enqueue: bool = True,
) -> JudgeLabelJob:
    """A pending job of the project asking the judge about its eligible solutions (`eligible_solutions`)
    the ids select, into a new AutoLabelRun of method judge; those asked for but not eligible are skipped.

    The run keeps the judge's spec, the template and its version, and the sampling parameters, which
    ask for logprobs (the verdict's probability) of a server and of a local model alike.
    """
    project = Project.objects.given(project)
    spec = resolve_spec(generator_spec)
    template = verification.check_template(template) if template else judge_template()
    sampling = replace(params or DEFAULT_PARAMS, n=1, stop=(), logprobs=judging.TOP_LOGPROBS)
    chosen, skipped = choose_solutions(eligible_solutions(project=project), solution_ids=solution_ids, limit=limit)
    with transaction.atomic():
        run = AutoLabelRun.objects.create(
            project=project, method=AutoLabelRun.Method.JUDGE, source=describe_spec(spec),
            params={"generator": spec, "template": template, "prompt_version": judging.prompt_version(template),
                    "sampling": sampling.as_dict()})
        job = JudgeLabelJob.objects.create(project=project, run=run, generator_spec=spec, solution_ids=chosen,
                                           total=len(chosen), skipped=skipped, created_by=created_by)
    if enqueue:
        transaction.on_commit(job.send_task)
    return job


# --- running a job -------------------------------------------------------------------------------------


def run_judge_job(*, job_id: int, chunk_seconds: float = CHUNK_SECONDS, resend: bool = True) -> JudgeLabelJob:
    """Ask the judge about the job's solutions not answered yet, for about `chunk_seconds`; idempotent.

    Returns the job: succeeded when every solution has its answer, or pending again when the
    chunk's time ran out first, its task sent again unless `resend` is False.
    """
    job = JudgeLabelJob.objects.select_related("run").get(pk=job_id)
    return run_labeling_job(job, todo=lambda: remaining_solutions(job), done=lambda: answered_count(job),
                            work=lambda solution, generator: judge_solution(job=job, solution=solution,
                                                                            generator=generator),
                            chunk_seconds=chunk_seconds, resend=resend)


def cancel_judge_job(*, job: JudgeLabelJob, user=None) -> bool:
    """Cancel an active job: the answer being asked for is still stored, no later one is asked."""
    return job.cancel(f"cancelled by {user}" if user else "cancelled")


def answered_count(job: JudgeLabelJob) -> int:
    return JudgeAnswer.objects.filter(run=job.run_id, solution_id__in=job.solution_ids).count()


def remaining_solutions(job: JudgeLabelJob):
    answered = JudgeAnswer.objects.filter(run=job.run_id).values("solution_id")
    return (Solution.objects.filter(pk__in=job.solution_ids).exclude(pk__in=answered)
            .select_related("problem").prefetch_related("steps").order_by("pk"))


def judge_solution(*, job: JudgeLabelJob, solution: Solution, generator: Generator) -> bool:
    """Ask the judge about one solution and store its answer, verdicts and cost; False if answered already."""
    run = job.run
    steps = sorted(solution.steps.all(), key=lambda step: step.index)
    prompt = verification.render_prompt(run.params["template"], problem=solution.problem.statement,
                                        steps=[step.text for step in steps])
    sample, failure = ask(generator, prompt, solution_params(run, solution))
    outcome = judging.Unparseable(failure) if failure else judging.read_answer(sample, n_steps=len(steps))
    with transaction.atomic():
        # The run row is the lock: two attempts at one solution write it once, in turn.
        AutoLabelRun.objects.select_for_update().filter(pk=run.pk).get()
        if JudgeAnswer.objects.filter(run=run, solution=solution).exists():
            return False
        store_answer(run=run, solution=solution, sample=sample, outcome=outcome)
        if isinstance(outcome, judging.Judged):
            AutoStepLabel.objects.bulk_create([
                AutoStepLabel(run=run, step=step, soft=verdict.p_good, critique=rendering.clean(verdict.critique))
                for step, verdict in zip(steps, outcome.verdicts)
            ])
        AutoLabelRun.objects.filter(pk=run.pk).update(tokens=F("tokens") + sample.completion_tokens)
        JudgeLabelJob.objects.filter(pk=job.pk).update(
            unparseable=JudgeAnswer.objects.filter(run=run, parsed=False).count())
    return True


def store_answer(*, run: AutoLabelRun, solution: Solution, sample: Sample,
                 outcome: judging.Judged | judging.Unparseable) -> JudgeAnswer:
    """The raw answer as text is stored everywhere (`rendering.clean`: a NUL, which PostgreSQL's text
    refuses, would fail the job), cut at its limit, with why it could not be read."""
    error = outcome.reason if isinstance(outcome, judging.Unparseable) else ""
    return JudgeAnswer.objects.create(
        run=run, solution=solution, text=rendering.clean(sample.text)[:JudgeAnswer.MAX_TEXT_CHARS], parsed=not error,
        error=error[:300], prompt_tokens=sample.prompt_tokens, completion_tokens=sample.completion_tokens)


def ask(generator: Generator, prompt: str, params: SamplingParams) -> tuple[Sample, str]:
    """The judge's answer, or an empty one and why the call failed after the generator's retries.

    Any failure: a server's error, a timeout, an answer over the size cap are the solution's outcome,
    kept and counted like an unreadable answer; the other solutions still get theirs.
    """
    try:
        return generator.generate([prompt], params)[0][0], ""
    except Exception as error:  # whatever the backend raised, once its retries are spent
        logger.warning("the judge %s failed on a solution: %s: %s", generator.name, type(error).__name__, error)
        return Sample(text="", prompt_tokens=0, completion_tokens=0, finish_reason="error"), (
            f"the call failed: {type(error).__name__}: {error}")

