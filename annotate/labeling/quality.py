"""Quality control: gold items, the screening gate, and agreement between people.

Agreement with gold is measured two ways, as PRM800K's authors did: step accuracy (the
share of steps both rated where the ratings match) and whether the first error was put
at the same step. Between annotators on overlapped items: Cohen's kappa on step ratings
and the share of pairs that agree on the first error. A step's rating is its verdict
(`annotate.labeling.verdicts`), as exports and training read it.
"""
from __future__ import annotations

import enum
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count, QuerySet

from annotate.labeling import queue_items, verdicts
from annotate.models import (
    Annotation,
    Generation,
    LabelingConfig,
    Project,
    QueueItem,
    ScreeningResult,
    Solution,
    Step,
)
from infra import statements

Ratings = list[int | None]


class Screening(enum.StrEnum):
    NONE = "none"  # No screening set exists: nothing to pass.
    PENDING = "pending"
    PASSED = "passed"
    FAILED = "failed"


def cohens_kappa(pairs: Iterable[tuple[int, int]]) -> float | None:
    """Cohen's kappa of two raters' labels; None without pairs."""
    pairs = list(pairs)
    if not pairs:
        return None
    n = len(pairs)
    observed = sum(a == b for a, b in pairs) / n
    first, second = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    expected = sum(first[k] * second[k] for k in first) / (n * n)
    if expected == 1:
        return 1.0  # Both raters used one label throughout: perfect, and kappa is 0/0.
    return (observed - expected) / (1 - expected)


def ratings_of(annotation_ids: Iterable[int]) -> dict[int, Ratings]:
    """Per annotation, its rating of each of the pool's own steps, by step index, up to the
    last one rated (`Verdicts.pool_ratings`: gold labels and other annotators rate those texts)."""
    found = verdicts.verdicts_by_annotation(Annotation.objects.filter(pk__in=list(annotation_ids)))
    return {pk: _rated_prefix(verdict.pool_ratings) for pk, verdict in found.items()}


def _rated_prefix(ratings: tuple[int | None, ...]) -> Ratings:
    rated = list(ratings)
    while rated and rated[-1] is None:
        rated.pop()
    return rated


def gold_of(solution_ids: Iterable[int]) -> dict[int, Ratings]:
    result: dict[int, Ratings] = defaultdict(list)
    rows = Step.objects.filter(solution_id__in=list(solution_ids)).order_by("solution_id", "index")
    for solution_id, rating in rows.values_list("solution_id", "gold_rating"):
        result[solution_id].append(rating)
    return result


@dataclass
class Agreement:
    """Agreement of labels with a reference (gold, or another annotator)."""

    items: int = 0
    steps_compared: int = 0
    steps_agreeing: int = 0
    first_error_matches: int = 0
    kappa: float | None = None

    @property
    def step_accuracy(self) -> float | None:
        return self.steps_agreeing / self.steps_compared if self.steps_compared else None

    @property
    def first_error_agreement(self) -> float | None:
        return self.first_error_matches / self.items if self.items else None

    def add(self, mine: Ratings, reference: Ratings) -> list[tuple[int, int]]:
        pairs = compared(mine, reference)
        self.items += 1
        self.steps_compared += len(pairs)
        self.steps_agreeing += sum(a == b for a, b in pairs)
        self.first_error_matches += _same_first_error(mine, reference)
        return pairs


def compared(mine: Ratings, reference: Ratings) -> list[tuple[int, int]]:
    """The (mine, reference) rating pairs of the steps both rated."""
    return [(a, b) for a, b in zip(mine, reference, strict=False) if a is not None and b is not None]


def disagree(mine: Ratings, reference: Ratings) -> bool:
    """Some step both rated has different ratings."""
    return any(a != b for a, b in compared(mine, reference))


def _same_first_error(mine: Ratings, reference: Ratings) -> bool:
    """Both put the first error at the same step, or neither found one in the steps both saw."""
    seen = min(len(mine), len(reference))
    mine_error, ref_error = verdicts.first_error(mine), verdicts.first_error(reference)
    if mine_error is None and ref_error is not None and ref_error >= seen:
        ref_error = None
    return mine_error == ref_error


def gold_agreement(annotations: Iterable[Annotation]) -> Agreement:
    """Agreement of submitted annotations with their solutions' gold step labels."""
    annotations = list(annotations)
    ratings = ratings_of(a.pk for a in annotations)
    gold = gold_of({a.solution_id for a in annotations})
    agreement = Agreement()
    for annotation in annotations:
        reference = gold.get(annotation.solution_id, [])
        if any(r is not None for r in reference):
            agreement.add(ratings.get(annotation.pk, []), reference)
    return agreement


def gold_standing(*, annotator, project=None) -> Agreement:
    """How an annotator's gold and screening items in the project compare with gold."""
    project = Project.objects.given(project)
    done = Annotation.objects.submitted().filter(project=project, annotator=annotator, solution__is_gold=True)
    return gold_agreement(done.only("pk", "solution_id"))


def screening_solution_ids(project=None) -> set[int]:
    project = Project.objects.given(project)
    return set(
        QueueItem.objects.filter(project=project, generation=Generation.SCREENING)
        .exclude(status=QueueItem.Status.RETIRED).values_list("solution_id", flat=True)
    )


# Asked at every claim while screening is required: built once per connection.
_DECIDED = statements.Compiled(lambda annotator_id, project_id: (
    ScreeningResult.objects.filter(annotator_id=annotator_id, project_id=project_id).values_list("passed")
))


def screening_status(*, annotator, project=None) -> Screening:
    """Whether the annotator has passed the project's screening set (generation -1): passing in
    one project passes nothing in another.

    Decided once they have submitted the whole set, and recorded (ScreeningResult): from then
    on their claims read that one row, however the set or its gold labels change, until an
    admin resets their screening.
    """
    project = Project.objects.given(project)
    decided = _DECIDED.rows(annotator_id=annotator.pk, project_id=project.pk)
    if decided:
        return Screening.PASSED if decided[0][0] else Screening.FAILED
    wanted = screening_solution_ids(project)
    if not wanted:
        return Screening.NONE
    done = list(
        Annotation.objects.submitted().filter(
            annotator=annotator, is_initial_screening=True, solution_id__in=wanted,
        ).only("pk", "solution_id")
    )
    if len({a.solution_id for a in done}) < len(wanted):
        return Screening.PENDING
    accuracy = gold_agreement(done).step_accuracy
    passed = accuracy is None or accuracy >= LabelingConfig.of(project).screening_pass_accuracy
    ScreeningResult.objects.get_or_create(
        project=project, annotator=annotator,
        defaults={"passed": passed, "step_accuracy": accuracy, "items": len(wanted)},
    )
    return Screening.PASSED if passed else Screening.FAILED


def reset_screening(*, annotator, project=None) -> int:
    """Let an annotator take the project's screening set again (an admin's decision, or a new guideline's)."""
    project = Project.objects.given(project)
    with transaction.atomic():
        ScreeningResult.objects.filter(project=project, annotator=annotator).delete()
        deleted, _ = Annotation.objects.filter(project=project, annotator=annotator, is_initial_screening=True).delete()
    return deleted


def shared_solutions(project=None) -> QuerySet:
    """Ids of the project's solutions that two or more submitted annotations label (a subquery)."""
    project = Project.objects.given(project)
    return (
        Annotation.objects.submitted().filter(project=project).values("solution_id").annotate(n=Count("pk")).filter(n__gte=2)
        .values("solution_id")
    )


def inter_annotator(*, project=None, annotator=None) -> Agreement:
    """Agreement between annotators on the project's solutions two or more of them submitted.

    With `annotator`, only the pairs that include them.
    """
    project = Project.objects.given(project)
    annotations = list(
        Annotation.objects.submitted().filter(solution_id__in=shared_solutions(project))
        .values_list("pk", "solution_id", "annotator_id").order_by("solution_id", "pk")
    )
    ratings = ratings_of(pk for pk, _, _ in annotations)
    agreement, pairs = Agreement(), []
    for _, group in itertools.groupby(annotations, key=lambda row: row[1]):
        for (a, _, user_a), (b, _, user_b) in itertools.combinations(list(group), 2):
            if annotator is None or annotator.pk in (user_a, user_b):
                pairs += agreement.add(ratings.get(a, []), ratings.get(b, []))
    agreement.kappa = cohens_kappa(pairs)
    return agreement


def make_gold(*, annotation: Annotation) -> Solution:
    """Make the annotation's ratings the gold labels of its solution (an admin's decision)."""
    ratings = ratings_of([annotation.pk]).get(annotation.pk, [])
    solution = annotation.solution
    with transaction.atomic():
        for step in Step.objects.filter(solution=solution):
            step.gold_rating = ratings[step.index] if step.index < len(ratings) else None
            step.save(update_fields=["gold_rating"])
        solution.is_gold = True
        solution.save(update_fields=["is_gold"])
        # A gold item is shown to everyone as quality control, never leased as ordinary work.
        queue_items.withdraw(solution=solution)
    return solution
