"""Every label source's word on a solution, made directly in the database: rollout counts, a
judge's verdicts and critiques (as a judge run stores them), and the current model's scores."""
from annotate.models import AutoLabelRun, AutoStepLabel
from tests.factories import scored_by_current_model


def rollout_labels(solution, counts: list[tuple[int, int]], *,
                   method=AutoLabelRun.Method.MATH_SHEPHERD) -> AutoLabelRun:
    """A rollout run labeling the solution's first steps with (K, N): K of N continuations reached the answer."""
    run = AutoLabelRun.objects.create(project_id=solution.project_id, method=method, source="local:tiny")
    steps = solution.steps.order_by("index")
    AutoStepLabel.objects.bulk_create(AutoStepLabel(run=run, step=step, n_correct=k, n_rollouts=n, soft=k / n)
                                      for step, (k, n) in zip(steps, counts))
    return run


def judge_labels(solution, verdicts: list[tuple[float, str]]) -> AutoLabelRun:
    """A judge run labeling the solution's first steps with (P(good), critique)."""
    run = AutoLabelRun.objects.create(project_id=solution.project_id, method=AutoLabelRun.Method.JUDGE,
                                      source="openai:verifier")
    steps = solution.steps.order_by("index")
    AutoStepLabel.objects.bulk_create(AutoStepLabel(run=run, step=step, soft=p, critique=critique)
                                      for step, (p, critique) in zip(steps, verdicts))
    return run


def prm_scores(solution, ps: list[float]) -> None:
    """The project's current model's P(step right) for each step."""
    scored_by_current_model(solution, ps)
