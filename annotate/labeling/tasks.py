"""The labeling task as its page shows it: each step's rating and state, the step to rate next,
and how the task can be submitted as it stands.

Steps are rated in order; with stop-at-first-error (LabelingConfig) the steps after a -1 are
greyed out and the task can be submitted as found_error. A task is built from its annotation's
rows (annotate.labeling.rows), read for the page or as an action left them.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from annotate.labeling import assistance, rows, verdicts
from annotate.labeling.assistance import Suggestion
from annotate.labeling.rows import AnnotationOrRef, AnnotationRow, StepValues
from annotate.models import Annotation, FinishReason, LabelingConfig, Problem
from infra import statements
from steps.ratings import is_error


class StepState(enum.StrEnum):
    RATED = "rated"
    CURRENT = "current"  # the next to rate
    LOCKED = "locked"  # waiting for the steps before it
    AFTER_ERROR = "after_error"  # past the first error (stop-at-first-error)


@dataclass
class StepRow:
    index: int
    text: str
    rating: int | None
    flagged: bool
    time_ms: int
    human_completion: str | None
    state: StepState
    submitted: bool = False  # the task's
    # The model disagreed with its rating: the page asks once to look again (assistance).
    second_look: bool = False
    # What that prompt says: the model's p, the judge's critique where it disagreed.
    look_again: assistance.SecondLook | None = None

    @property
    def inactive(self) -> bool:
        """Greyed out: waiting for earlier steps, or past the first error."""
        return self.state in (StepState.LOCKED, StepState.AFTER_ERROR)

    @property
    def disabled(self) -> bool:
        """Its buttons are off: inactive, or the task is submitted."""
        return self.inactive or self.submitted


@dataclass
class Task:
    """What the labeling page shows of one annotation."""

    annotation: AnnotationRow
    steps: list[StepRow]
    next_index: int | None
    first_error: int | None
    finish_reason: FinishReason | None
    config: LabelingConfig
    # After a rating: the steps whose row on the page it changed (None: not known, show all).
    changed: set[int] | None = None
    # The model's first-error guess, shown from the start in a `suggest` project (assistance).
    suggestion: Suggestion | None = None

    @property
    def submitted(self) -> bool:
        return self.annotation.is_submitted

    @property
    def rated_count(self) -> int:
        return sum(row.rating is not None for row in self.steps if row.state != StepState.AFTER_ERROR)

    @property
    def countable(self) -> int:
        return sum(row.state != StepState.AFTER_ERROR for row in self.steps)


def task_view(annotation: AnnotationOrRef, config: LabelingConfig | None = None) -> Task:
    """The page's view of the owner's annotation (Annotation.DoesNotExist if not theirs)."""
    row, steps = rows.read(annotation)
    config = config or LabelingConfig.of(annotation.project_id)
    return build(row, steps, config, assistance.suggestion_for(solution_id=row.solution_id, config=config))


def claimed_view(annotation: Annotation) -> Task:
    """task_view of a task the caller has just claimed (queueing.claim_next): a new one is built
    from the steps the claim wrote, none rated yet (starting.start), without reading them back;
    a resumed one is read."""
    started = getattr(annotation, "started_steps", None)
    if started is None:
        return task_view(annotation)
    steps = [StepValues(step.step_index, step.text, None, None, None, None) for step in started]
    config = LabelingConfig.of(annotation.project_id)
    return build(AnnotationRow.of(annotation), steps, config,
                 assistance.suggestion_for(solution_id=annotation.solution_id, config=config))


class ProblemText(NamedTuple):
    statement: str
    ground_truth_answer: str | None


_PROBLEM = statements.Compiled(lambda solution_id: (
    Problem.objects.filter(solutions__pk=solution_id).values_list("statement", "ground_truth_answer")
), row=ProblemText)


def problem_of(task: Task) -> ProblemText:
    """What the task's page shows of its problem: the statement and the answer."""
    (problem,) = _PROBLEM.rows(solution_id=task.annotation.solution_id)
    return problem


def build(annotation: AnnotationRow, steps: list[StepValues], config: LabelingConfig,
          suggestion: Suggestion | None = None) -> Task:
    """The task of an annotation with these steps, under these settings. A second look waiting
    for its answer holds the task there: that step is the next to rate, and it cannot be submitted."""
    ratings = [step.rating for step in steps]
    first_error = verdicts.first_error(ratings)
    waiting = assistance.waiting_index([step.assistance for step in steps], ratings)
    following = next_index(ratings, config) if waiting is None else waiting
    shown = []
    for step in steps:
        if config.stop_at_first_error and first_error is not None and step.step_index > first_error:
            state = StepState.AFTER_ERROR
        elif step.rating is not None:
            state = StepState.RATED
        else:
            state = StepState.CURRENT if step.step_index == following else StepState.LOCKED
        asked = step.step_index == waiting
        shown.append(StepRow(step.step_index, step.text, step.rating, bool(step.flagged), step.time_ms or 0,
                             (step.human_completion or {}).get("text"), state, annotation.is_submitted, asked,
                             assistance.second_look(step.assistance, config.assistance_margin) if asked else None))
    reason = finish_reason(ratings, config) if waiting is None else None
    return Task(annotation, shown, following, first_error, reason, config, suggestion=suggestion)


def next_index(ratings: list[int | None], config: LabelingConfig) -> int | None:
    """The first step still to rate; None when no more ratings are needed."""
    for index, rating in enumerate(ratings):
        if rating is None:
            return index
        if is_error(rating) and config.stop_at_first_error:
            return None
    return None


def finish_reason(ratings: list[int | None], config: LabelingConfig) -> FinishReason | None:
    """How the task can be submitted as it stands: found_error, solution, or None (not yet)."""
    first_error = verdicts.first_error(ratings)
    if first_error is not None and config.stop_at_first_error:
        return FinishReason.FOUND_ERROR
    if not ratings or any(r is None for r in ratings):
        return None
    return FinishReason.FOUND_ERROR if first_error is not None else FinishReason.SOLUTION
