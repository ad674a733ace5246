"""A step's verdict: which rating of a labeled step counts. The one definition.

PRM800K stores, per step, the completions the annotator was shown (each rated), which one
was continued (`chosen_completion`) and possibly a completion the annotator wrote instead
(`human_completion`). Every reader of labels (exports, training rows, QC, agreement, review,
the active-learning simulation) asks the same question of them, and answers it here:

- the chosen completion's rating, when one was chosen;
- a human completion counts as written by the annotator: +1, unless a rating was recorded
  on it (a reviewer's override);
- a step with neither is where the annotator stopped: -1 if any completion there was rated
  -1 (PRM800K's last step of a `found_error` line), else completion 0's rating (None when
  unrated).

A reviewer's override changes the rating of the completion that carries the verdict (its
history kept in RatingOverride), so an override reaches every reader at once.

The functions take anything shaped like an annotation: `.step_labels.all()` whose items
have `index`, `chosen_completion`, `human_completion` and `.completions.all()` (with
`index`, `text`, `rating`, `flagged`). Model instances with prefetched relations and the
exporter's plain records both are.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

Source = Literal["chosen", "human", "stopped"]


@dataclass(frozen=True)
class StepVerdict:
    index: int
    text: str  # the text the verdict is about: the chosen, human or stopped-at completion
    rating: int | None
    flagged: bool
    source: Source
    completion_index: int | None  # the Completion carrying the verdict; None for a human one


@dataclass(frozen=True)
class Verdicts:
    """Every step's verdict of one annotation, and where its first error is."""

    annotation_id: int | None
    steps: tuple[StepVerdict, ...]

    @property
    def ratings(self) -> tuple[int | None, ...]:
        return tuple(step.rating for step in self.steps)

    @property
    def first_error(self) -> int | None:
        """Index of the first step whose verdict is -1; None when there is none."""
        return first_error(self.ratings)

    def is_after_first_error(self, index: int) -> bool:
        error = self.first_error
        return error is not None and index > error

    @property
    def path(self) -> tuple[StepVerdict, ...]:
        """The steps the annotator walked and rated: up to and including the first error,
        ending before the first unrated step (it has no label to give)."""
        walked: list[StepVerdict] = []
        for step in self.steps:
            if step.rating is None:
                break
            walked.append(step)
            if step.rating == -1:
                break
        return tuple(walked)


def first_error(ratings: Iterable[int | None]) -> int | None:
    """Index of the first -1 in a sequence of ratings; None when there is none."""
    return next((i for i, rating in enumerate(ratings) if rating == -1), None)


def step_verdict(step_label: Any) -> StepVerdict:
    """The verdict of one labeled step (see the module docstring for the rule)."""
    completions = sorted(step_label.completions.all(), key=lambda c: c.index)
    chosen = next((c for c in completions if c.index == step_label.chosen_completion), None)
    if chosen is not None:
        return _from_completion(step_label.index, chosen, "chosen")
    human = step_label.human_completion
    if human is not None:
        text, rating, flagged = _human(human)
        return StepVerdict(step_label.index, text, 1 if rating is None else rating, flagged, "human", None)
    stopped = next((c for c in completions if c.rating == -1), completions[0] if completions else None)
    if stopped is None:
        return StepVerdict(step_label.index, "", None, False, "stopped", None)
    return _from_completion(step_label.index, stopped, "stopped")


def verdicts(annotation: Any) -> Verdicts:
    """Every step's verdict of one annotation, in step order."""
    labels = sorted(annotation.step_labels.all(), key=lambda label: label.index)
    return Verdicts(getattr(annotation, "id", None), tuple(step_verdict(label) for label in labels))


def verdicts_by_annotation(annotations) -> dict[int, Verdicts]:
    """Verdicts of every annotation in a queryset, keyed by annotation id (two extra queries)."""
    prefetched = annotations.prefetch_related("step_labels__completions")
    return {annotation.pk: verdicts(annotation) for annotation in prefetched.iterator(chunk_size=2000)}


def _from_completion(index: int, completion: Any, source: Source) -> StepVerdict:
    return StepVerdict(index, completion.text, completion.rating, bool(completion.flagged), source, completion.index)


def _human(human: object) -> tuple[str, int | None, bool]:
    if isinstance(human, dict):
        rating = human.get("rating")
        return str(human.get("text") or ""), rating if rating in (-1, 0, 1) else None, bool(human.get("flagged"))
    return str(human), None, False
