"""Reviewing submitted labels: filters, PRM scores beside them, overrides with history."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from django.apps import apps
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from annotate import labeling, quality
from annotate.models import Annotation, Completion, RatingOverride, Step, StepLabel


def submitted_annotations(*, annotator_id: int | None = None, generation: int | None = None,
                          disagreement: bool = False) -> QuerySet[Annotation]:
    """Submitted annotations, newest first, optionally of one annotator / generation.

    `disagreement`: only those where another submitted annotation of the same solution,
    or the solution's gold label, rates some step differently.
    """
    qs = Annotation.objects.filter(status=Annotation.Status.SUBMITTED).select_related("annotator", "solution__problem")
    if annotator_id is not None:
        qs = qs.filter(annotator_id=annotator_id)
    if generation is not None:
        qs = qs.filter(generation=generation)
    if disagreement:
        qs = qs.filter(Exists(_differing_completions()))
    return qs.order_by("-timestamp", "-pk")


def _differing_completions() -> QuerySet[Completion]:
    """This annotation's step ratings that another label of the solution contradicts."""
    other = Completion.objects.filter(
        index=0, step_label__index=OuterRef("step_label__index"), rating__isnull=False,
        step_label__annotation__solution_id=OuterRef(OuterRef("solution_id")),
        step_label__annotation__status=Annotation.Status.SUBMITTED,
    ).exclude(step_label__annotation_id=OuterRef(OuterRef("pk"))).exclude(rating=OuterRef("rating"))
    gold_differs = Step.objects.filter(
        solution_id=OuterRef(OuterRef("solution_id")), index=OuterRef("step_label__index"), gold_rating__isnull=False,
    ).exclude(gold_rating=OuterRef("rating"))
    mine = Completion.objects.filter(step_label__annotation_id=OuterRef("pk"), index=0, rating__isnull=False)
    return mine.filter(Q(Exists(other)) | Q(Exists(gold_differs)))


@dataclass
class PrmScores:
    model_name: str
    steps: dict[int, float]
    solution: dict[str, float] = field(default_factory=dict)


def prm_scores(*, solution_id: int) -> PrmScores | None:
    """The PRM's scores of a solution, from the current model if it scored it, else the newest.

    Read through the app registry: the labeling side never imports `scoring`.
    """
    SolutionScore = apps.get_model("scoring", "SolutionScore")
    StepScore = apps.get_model("scoring", "StepScore")
    score = (
        SolutionScore.objects.filter(solution_id=solution_id).select_related("model_version")
        .order_by("-model_version__is_current", "-model_version__created_at").first()
    )
    if score is None:
        return None
    steps = StepScore.objects.filter(step__solution_id=solution_id, model_version_id=score.model_version_id)
    return PrmScores(
        model_name=score.model_version.name,
        steps=dict(steps.values_list("step__index", "p")),
        solution={"product": score.product, "min": score.min, "last": score.last, "mean": score.mean},
    )


def override_rating(*, annotation: Annotation, index: int, rating: int | None, reviewer, note: str = "") -> RatingOverride:
    """Change a submitted step rating; the old value stays in the override history."""
    if rating not in (*labeling.RATINGS, None):
        raise labeling.LabelingError(f"rating must be one of -1, 0, 1, not {rating!r}")
    if annotation.status != Annotation.Status.SUBMITTED:
        raise labeling.LabelingError("only submitted annotations are reviewed")
    with transaction.atomic():
        completion = Completion.objects.select_for_update().filter(
            step_label__annotation=annotation, step_label__index=index, index=0
        ).first()
        if completion is None:
            raise labeling.LabelingError(f"step {index + 1} is not part of this annotation")
        override = RatingOverride.objects.create(
            completion=completion, reviewer=reviewer, previous_rating=completion.rating, new_rating=rating,
            note=note.strip(),
        )
        completion.rating = rating
        completion.save(update_fields=["rating"])
    return override


@dataclass
class ReviewRow:
    index: int
    text: str
    ratings: list[int | None]  # One per annotation shown, in order.
    gold: int | None
    prm: float | None
    overrides: list[RatingOverride]


def review_rows(*, annotation: Annotation, others: list[Annotation], scores: PrmScores | None) -> list[ReviewRow]:
    """The solution's steps with this and other annotators' ratings, gold and PRM side by side."""
    shown = [annotation, *others]
    ratings = quality.ratings_of(a.pk for a in shown)
    overrides: dict[int, list[RatingOverride]] = {}
    for override in RatingOverride.objects.filter(completion__step_label__annotation=annotation).select_related(
        "reviewer", "completion__step_label"
    ):
        overrides.setdefault(override.completion.step_label.index, []).append(override)
    rows = []
    for step in annotation.solution.steps.order_by("index"):
        rows.append(ReviewRow(
            index=step.index, text=step.text, gold=step.gold_rating,
            ratings=[_at(ratings.get(a.pk, []), step.index) for a in shown],
            prm=scores.steps.get(step.index) if scores else None, overrides=overrides.get(step.index, []),
        ))
    return rows


def _at(values: list, index: int):
    return values[index] if index < len(values) else None


@dataclass
class Progress:
    today: int
    overall: int
    steps_today: int
    median_seconds: float | None
    standing: quality.Agreement
    screening: str


def progress(*, annotator) -> Progress:
    """An annotator's home-page figures: work done, gold standing, median time per task."""
    mine = Annotation.objects.filter(annotator=annotator, status=Annotation.Status.SUBMITTED)
    start_of_day = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    today = mine.filter(timestamp__gte=start_of_day)
    times = list(mine.filter(total_time_ms__isnull=False).order_by("-timestamp").values_list("total_time_ms", flat=True)[:500])
    return Progress(
        today=today.count(),
        overall=mine.count(),
        steps_today=StepLabel.objects.filter(annotation__in=today).count(),
        median_seconds=statistics.median(times) / 1000 if times else None,
        standing=quality.gold_standing(annotator=annotator),
        screening=quality.screening_status(annotator=annotator),
    )
