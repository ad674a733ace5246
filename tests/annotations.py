"""Submitted annotations made directly in the database, PRM800K phase-2 style, for tests."""
from django.utils import timezone

from annotate.models import Annotation, Completion, StepLabel


def annotate(solution, ratings: list[int], *, labeler: str = "lab-1", annotator=None, generation: int | None = 1,
             finish_reason: str | None = None, quality_control: bool = False, timestamp=None,
             status: str = Annotation.Status.SUBMITTED) -> Annotation:
    """One annotation rating the solution's steps in order; a -1 step ends it (found_error)."""
    steps = list(solution.steps.order_by("index"))
    if finish_reason is None:
        finish_reason = "found_error" if -1 in ratings else "solution"
    annotation = Annotation.objects.create(
        solution=solution, labeler=labeler, annotator=annotator, status=status, generation=generation,
        finish_reason=finish_reason, is_quality_control=quality_control, total_time_ms=1000,
        timestamp=timestamp or timezone.now(),
    )
    for step, rating in zip(steps, ratings):
        last = rating == -1
        label = StepLabel.objects.create(annotation=annotation, index=step.index, chosen_completion=None if last else 0)
        Completion.objects.create(step_label=label, index=0, text=step.text, rating=rating, flagged=False)
        if last:
            break
    return annotation
