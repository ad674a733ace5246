"""Reviewing submitted labels: filters, disagreements, overrides with history.

Every rating shown, compared or overridden here is an annotation's label of the pool's own
step (`annotate.labeling.verdicts`' `pool_labels`: a step the annotator rewrote keeps its -1, the
rewrite shown beside it), so the review page says what exports, training and QC say. The PRM's scores beside the
labels are scoring's to show (`scoring:review-scores`, loaded into the page): the labeling
side never reads scoring's tables.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from annotate.labeling import actions as labeling
from annotate.labeling import assistance, quality, sources, verdicts
from annotate.labeling.sources import StepSources
from annotate.models import (
    Annotation,
    AutoStepLabel,
    Completion,
    FinishReason,
    LabelingConfig,
    Project,
    RatingOverride,
    Step,
    StepLabel,
)
from steps.ratings import is_error

# Why an annotation is put before a reviewer: the filters of the review list, and the reason shown.
REVIEW_REASONS = {
    "disagreement": "another annotator or the gold label gives some step a different rating",
    "answer_contradicts_labels": "every step is rated correct, but the final answer grades as wrong",
}


def annotations_for_review(*, project=None, annotator_id: int | None = None, generation: int | None = None,
                           disagreement: bool = False, contradiction: bool = False) -> QuerySet[Annotation]:
    """The project's submitted annotations, newest first, optionally of one annotator / generation.

    `disagreement`: only those where another submitted annotation of the same solution,
    or the solution's gold label, gives some step a different verdict. `contradiction`: only
    those whose labels the automatic grade contradicts (`contradicting`).
    """
    project = Project.objects.given(project)
    qs = Annotation.objects.submitted().filter(project=project).select_related("annotator", "solution__problem")
    if annotator_id is not None:
        qs = qs.filter(annotator_id=annotator_id)
    if generation is not None:
        qs = qs.filter(generation=generation)
    if disagreement:
        qs = qs.filter(pk__in=disagreeing(qs))
    if contradiction:
        qs = qs.filter(pk__in=contradicting(qs))
    return qs.order_by("-timestamp", "-pk")


def contradicting(annotations: QuerySet[Annotation]) -> list[int]:
    """Ids of those `annotations` that rate every step correct (finished as solution) of a
    solution whose final answer grades as wrong (`Verdicts.contradicts_grade`): an error missed,
    or a grade that is wrong. ProcessBench leaves them out (its rows would state both)."""
    candidates = annotations.filter(finish_reason=FinishReason.SOLUTION, solution__is_correct=False).order_by()
    found = verdicts.verdicts_by_annotation(candidates)
    return [pk for pk, verdict in found.items() if verdict.contradicts_grade(FinishReason.SOLUTION, False)]


def review_reasons(annotation: Annotation) -> list[str]:
    """Why this submitted annotation is before a reviewer (REVIEW_REASONS' keys); empty when
    nothing singles it out."""
    one = Annotation.objects.filter(pk=annotation.pk)
    return [reason for reason, ids in (("disagreement", disagreeing(one)),
                                       ("answer_contradicts_labels", contradicting(one))) if annotation.pk in ids]


def disagreeing(annotations: QuerySet[Annotation]) -> list[int]:
    """Ids of those `annotations` that another label of their solution contradicts at some step.

    The other label is another submitted annotation's verdict, or the solution's gold rating.
    Only solutions with two annotations or a gold label can disagree, so only those are read.
    """
    gold_solutions = Step.objects.filter(gold_rating__isnull=False).values("solution_id")
    shared = Annotation.objects.submitted().filter(solution_id=OuterRef("solution_id")).exclude(pk=OuterRef("pk"))
    candidates = annotations.filter(Q(Exists(shared)) | Q(solution_id__in=gold_solutions))
    mine = dict(candidates.order_by().values_list("pk", "solution_id"))
    peers: dict[int, list[int]] = defaultdict(list)
    for pk, solution_id in Annotation.objects.submitted().filter(solution_id__in=set(mine.values())).values_list(
        "pk", "solution_id"
    ):
        peers[solution_id].append(pk)
    ratings = quality.ratings_of(pk for group in peers.values() for pk in group)
    gold = quality.gold_of(set(mine.values()))
    result = []
    for pk, solution_id in mine.items():
        references = [ratings.get(other, []) for other in peers[solution_id] if other != pk]
        if any(quality.disagree(ratings.get(pk, []), reference) for reference in [*references, gold[solution_id]]):
            result.append(pk)
    return result


def override_rating(
    *, annotation: Annotation, index: int, rating: int | None, reviewer, note: str = ""
) -> RatingOverride:
    """Change a submitted annotation's rating of pool step `index`; the old value stays in the history.

    The rating changed is the one the pool step's label is read from (`annotate.labeling.verdicts`):
    the chosen completion's, the human completion's (the annotator wrote the step), the
    completion stopped at, or the pool step an annotator rewrote. Every reader sees the change
    at once. The finish reason is then derived again from the ratings by the one verdict
    rule: found_error when a step is wrong, solution when every step is rated and none is.
    An override after which the ratings say neither (the only -1 raised while the steps after
    it were never rated) is refused, and nothing is saved: the message says why.
    """
    rating = None if rating is None else labeling.parse_rating(rating)
    if not annotation.is_submitted:
        raise labeling.LabelingError("only submitted annotations are reviewed")
    note = labeling.check_note(note)
    with transaction.atomic():
        locked = Annotation.objects.select_for_update().get(pk=annotation.pk)
        step_label = (
            StepLabel.objects.select_for_update().filter(annotation=locked, index=index)
            .prefetch_related("completions").first()
        )
        pool_step = Step.objects.filter(solution_id=locked.solution_id, index=index).first()
        if step_label is None or pool_step is None:
            raise labeling.LabelingError(f"step {index + 1} is not part of this annotation")
        verdict = verdicts.step_verdict(step_label)
        before = verdict.label_of(pool_step.text)
        completion = _set_rating(step_label, verdict.carrier_of(pool_step.text), rating)
        _end_or_go_on(locked, step_label, completion)
        if verdicts.step_verdict(step_label).label_of(pool_step.text).rating != rating:
            raise labeling.LabelingError(f"step {index + 1}: this override would not become the step's rating")
        changed = _rederive_finish_reason(locked)
        if changed:
            note = f"{note.strip()} (finish reason {changed})".strip()
        else:  # the finish reason saved nothing, yet the labels changed: updated_at says so
            locked.save(update_fields=["updated_at"])
        return RatingOverride.objects.create(
            step_label=step_label, completion=completion, reviewer=reviewer, previous_rating=before.rating,
            new_rating=rating, note=note,
        )


def _end_or_go_on(annotation: Annotation, step_label: StepLabel, completion: Completion | None) -> None:
    """Where the line ends after an override (`verdicts`' "where a line ends").

    In a project that stops at the first error, a -1 on a completion the annotator went on
    from ends the task's line there, as if they had rated it -1 themselves: the step is no
    longer gone on from, and the ratings after it stop being labels (kept, not deleted). An
    override that takes the -1 away goes on from it again, and they are labels again. Only
    tasks labeled here: an imported line was labeled under its own rules, and keeps its shape.
    """
    labeled_here = annotation.annotator_id is not None or annotation.queue_item_id is not None
    if completion is None or not labeled_here or step_label.human_completion is not None:
        return
    if is_error(completion.rating) and step_label.chosen_completion == completion.index:
        if LabelingConfig.of(annotation.project_id).stop_at_first_error:
            step_label.chosen_completion = None
            step_label.save(update_fields=["chosen_completion"])
    elif not is_error(completion.rating) and step_label.chosen_completion is None:
        step_label.chosen_completion = completion.index
        step_label.save(update_fields=["chosen_completion"])


def _rederive_finish_reason(annotation: Annotation) -> str:
    """Set the finish reason the ratings now say; return "old → new" when it changed.

    give_up and bad_problem stand: they are the annotator's judgement of the task.
    """
    if annotation.finish_reason not in (FinishReason.SOLUTION, FinishReason.FOUND_ERROR):
        return ""
    verdict = verdicts.verdicts_by_annotation(Annotation.objects.filter(pk=annotation.pk))[annotation.pk]
    derived = verdict.derived_finish_reason()
    if derived is None:
        raise labeling.LabelingError(
            f"refused: after this override no step is rated -1, yet steps after step {len(verdict.path)} were "
            f"never rated, so this annotation would be neither found_error nor a finished solution"
        )
    if derived == annotation.finish_reason:
        return ""
    old, annotation.finish_reason = annotation.finish_reason, derived
    annotation.save(update_fields=["finish_reason", "updated_at"])
    return f"{old} → {derived}"


def _set_rating(step_label: StepLabel, carrier: verdicts.StepVerdict | verdicts.Shown | None, rating: int | None):
    """Write `rating` where `carrier` is read from; return that Completion (None: the human completion)."""
    if carrier is None:
        raise labeling.LabelingError(f"step {step_label.index + 1}: the annotator never rated this step's text")
    if isinstance(carrier, verdicts.StepVerdict) and carrier.source == "human":
        if rating is None:
            raise labeling.LabelingError(
                f"step {step_label.index + 1} was written by the annotator: rate it -1, 0 or +1"
            )
        human = step_label.human_completion
        step_label.human_completion = {**human, "rating": rating} if isinstance(human, dict) else {
            "text": str(human), "rating": rating}
        step_label.save(update_fields=["human_completion"])
        return None
    completion = next((c for c in step_label.completions.all() if c.index == carrier.completion_index), None)
    if completion is None:
        raise labeling.LabelingError(f"step {step_label.index + 1} has no rated completion to override")
    completion.rating = rating
    completion.save(update_fields=["rating"])
    return completion


@dataclass
class ReviewCell:
    """One annotation's label of one pool step, as the review table shows it."""

    rating: int | None
    flagged: bool = False  # the annotator flagged it: cannot judge
    written_instead: str | None = None  # the annotator's own text for this step (a rewrite)


@dataclass
class ReviewRow:
    index: int
    text: str
    cells: list[ReviewCell]  # One per annotation shown, in order.
    gold: int | None
    overrides: list[RatingOverride]
    # Automatic labels of this step (rollouts, imports), one per run: shown apart, never as a rating.
    automatic: list[AutoStepLabel] = field(default_factory=list)
    # Every source's word on the step (people, rollouts, judge, PRM), as `sources` reads it everywhere.
    sources: StepSources | None = None

    @property
    def ratings(self) -> list[int | None]:
        return [cell.rating for cell in self.cells]

    @property
    def verdicts(self) -> dict[str, bool | None]:
        """Each source's verdict, by name (for the template, which cannot pass an argument)."""
        return self.sources.verdicts() if self.sources else {}


def review_rows(*, annotation: Annotation, others: list[Annotation]) -> list[ReviewRow]:
    """The solution's steps with this and other annotators' labels (flags, rewrites) and gold side by side."""
    shown = [annotation, *others]
    found = verdicts.verdicts_by_annotation(Annotation.objects.filter(pk__in=[a.pk for a in shown]))
    labels = {pk: verdict.pool_labels for pk, verdict in found.items()}
    overrides: dict[int, list[RatingOverride]] = defaultdict(list)
    for override in RatingOverride.objects.filter(step_label__annotation=annotation).select_related(
        "reviewer", "step_label"
    ):
        overrides[override.step_label.index].append(override)
    automatic: dict[int, list[AutoStepLabel]] = defaultdict(list)
    for auto in AutoStepLabel.objects.automatic().filter(step__solution=annotation.solution) \
            .select_related("run", "step").order_by("run_id"):
        automatic[auto.step.index].append(auto)
    words = dict(enumerate(solution_sources(annotation.solution_id)))
    return [
        ReviewRow(index=step.index, text=step.text, gold=step.gold_rating, overrides=overrides.get(step.index, []),
                  cells=[_cell(labels.get(a.pk, ()), step.index) for a in shown], automatic=automatic[step.index],
                  sources=words.get(step.index))
        for step in annotation.solution.steps.order_by("index")
    ]


def solution_sources(solution_id: int) -> list[StepSources]:
    """Every source's word on each step of one solution, the PRM's from the project's current model:
    what the review page and the API show side by side."""
    found = sources.for_solutions([solution_id], prm={solution_id: assistance.model_ps(solution_id=solution_id)})
    return found[solution_id]


def _cell(labels: tuple[verdicts.PoolStepLabel, ...], index: int) -> ReviewCell:
    if index >= len(labels):
        return ReviewCell(None)
    label = labels[index]
    return ReviewCell(label.rating, label.flagged, label.written_instead)


@dataclass
class Progress:
    today: int
    overall: int
    steps_today: int
    median_seconds: float | None
    standing: quality.Agreement
    screening: str


def progress(*, annotator, project=None) -> Progress:
    """An annotator's home-page figures in the project: work done, gold standing, median time per task."""
    project = Project.objects.given(project)
    mine = Annotation.objects.submitted().filter(project=project, annotator=annotator)
    start_of_day = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    today = mine.filter(timestamp__gte=start_of_day)
    times = list(
        mine.filter(total_time_ms__isnull=False).order_by("-timestamp").values_list("total_time_ms", flat=True)[:500]
    )
    return Progress(
        today=today.count(),
        overall=mine.count(),
        steps_today=StepLabel.objects.filter(annotation__in=today).count(),
        median_seconds=statistics.median(times) / 1000 if times else None,
        standing=quality.gold_standing(annotator=annotator, project=project),
        screening=quality.screening_status(annotator=annotator, project=project),
    )
