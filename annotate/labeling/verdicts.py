"""A step's verdict: which rating of a labeled step counts, and which text it is about. The one definition.

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

**Which text carries the verdict.** A verdict is about one text, `StepVerdict.text`: the
chosen completion, the human completion, or the completion stopped at. Readers that write
texts with labels (TRL rows) write that text with it. Readers that label the pool's own steps
(ProcessBench, soft labels, training rows, QC against gold, review) read
`Verdicts.pool_ratings`: per pool step, the rating given to that very text. Where the
annotator replaced a pool step (rated it -1 and wrote their own), the pool step's rating is
its -1, not the +1 of the text that replaced it; the other completions shown at a step are
kept as `alternatives`, so that rating is never lost.

**A rewritten step** (the annotator rated the pool's step -1 and wrote the step as it should
be, a human completion; with written corrections on and stop-at-first-error off, they go on
rating the steps after it) holds two labels, one per text, and each consumer takes the one
about the text it writes:

- PRM800K: the step keeps its rated completion(s), the pool's text with its -1;
  `human_completion` holds the rewrite and `chosen_completion` is null: the path went on from
  the rewrite. The steps labeled after it are chosen (0), as in PRM800K's phase-1 lines; only
  the -1 a found_error task ends on is left unchosen (`chosen_at_submit`, which labeling's
  submit writes).
- TRL (JSONL and Parquet alike): a row for the path up to the step, ending in the pool's text
  labeled False; the path goes on with the rewrite labeled True and the steps after it, to
  the first -1 or unrated step, so nothing the annotator wrote is dropped. A task with one
  rewrite that ends on a good step gives two rows.
- ProcessBench, soft labels, training rows, QC against gold, agreement and review: the pool's
  own step, rated -1. It is the solution's first error, and the steps after it carry no label
  to learn from (`pool_path`), as after any first error.

**The first error** is a step index, or None when no error was found. Only the ProcessBench
export writes -1 for "no error", because its format says so.

A reviewer's override changes the rating of the completion that carries the pool step's
rating (its history kept in RatingOverride), so an override reaches every reader at once.

**Where a line ends.** A step with neither a chosen nor a human completion is where the
annotator stopped: nobody went on from it, so the labels end there (`held`), in every reader,
the PRM800K line included. A reviewer's -1 on a step the annotator had gone on from, in a
project that stops at the first error, makes it such a step (annotate.labeling.reviewing): the
ratings the annotator gave after it, believing it right, are no labels any more, and come back
if the override is undone. A step rated -1 and gone on from (a project whose annotators rate
every step) or rewritten (a human completion) keeps the steps after it: the line says so.

The functions take anything shaped like an annotation: `.step_labels.all()` whose items
have `index`, `chosen_completion`, `human_completion` and `.completions.all()` (with
`index`, `text`, `rating`, `flagged`), and `.solution.steps.all()` (with `text`). Model
instances with prefetched relations and the exporter's plain records both are.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

# The text core's definition, which labeling and QC also reach as `verdicts.first_error`.
from steps.arithmetic import first_error
from steps.ratings import Rating, is_error, is_rating

Source = Literal["chosen", "human", "stopped"]
FOUND_ERROR, SOLUTION, BAD_PROBLEM = "found_error", "solution", "bad_problem"  # annotate.models.FinishReason values


@dataclass(frozen=True)
class Shown:
    """A completion shown at a step that does not carry the step's verdict."""

    completion_index: int
    text: str
    rating: int | None
    flagged: bool


@dataclass(frozen=True)
class StepVerdict:
    index: int
    text: str  # the text the verdict is about: the chosen, human or stopped-at completion
    rating: int | None
    flagged: bool
    source: Source
    completion_index: int | None  # the Completion carrying the verdict; None for a human one
    alternatives: tuple[Shown, ...] = ()  # the other completions shown here, in index order

    def carrier_of(self, text: str) -> StepVerdict | Shown | None:
        """What holds the rating of `text` at this step: the verdict itself when it is about
        that text, else the shown completion with that text; None when `text` was not rated here."""
        if _same(self.text, text):
            return self
        return next((c for c in self.alternatives if _same(c.text, text)), None)

    def label_of(self, pool_text: str) -> PoolStepLabel:
        """What this step says of the pool's own step `pool_text`."""
        carrier = self.carrier_of(pool_text)
        written = self.text if self.source == "human" and carrier is not self else None
        if carrier is None:
            return PoolStepLabel(None, False, written)
        return PoolStepLabel(carrier.rating, bool(carrier.flagged), written)


@dataclass(frozen=True)
class PoolStepLabel:
    """An annotation's label of one pool step: the rating and flag given to its very text, and
    the annotator's own text for the step when they rewrote it (a human completion)."""

    rating: int | None
    flagged: bool
    written_instead: str | None = None


@dataclass(frozen=True)
class Verdicts:
    """Every step's verdict of one annotation, and what they say of the pool's own steps.

    Frozen, so the derived tuples are computed once (`cached_property`): an export reads them
    several times per annotation.
    """

    annotation_id: int | None
    steps: tuple[StepVerdict, ...]
    pool_steps: tuple[str, ...] = ()  # the solution's own step texts, in order

    @functools.cached_property
    def ratings(self) -> tuple[int | None, ...]:
        """The verdicts along the annotator's path, each about its own `text`."""
        return tuple(step.rating for step in self.steps)

    @functools.cached_property
    def pool_labels(self) -> tuple[PoolStepLabel, ...]:
        """Per pool step, what the annotator said of that very text (rating None: not rated)."""
        by_index = {step.index: step for step in self.steps}
        return tuple(
            by_index[i].label_of(text) if i in by_index else PoolStepLabel(None, False)
            for i, text in enumerate(self.pool_steps)
        )

    @functools.cached_property
    def pool_ratings(self) -> tuple[int | None, ...]:
        """Per pool step, the rating the annotator gave that very text (None: not rated)."""
        return tuple(label.rating for label in self.pool_labels)

    @property
    def pool_path(self) -> tuple[int | None, ...]:
        """`pool_ratings` as labels to learn from: up to and including the first -1, ending
        before the first unrated step; None for every pool step after."""
        walked: list[int | None] = []
        for rating in self.pool_ratings:
            if rating is None:
                break
            walked.append(rating)
            if is_error(rating):
                break
        return (*walked, *[None] * (len(self.pool_steps) - len(walked)))

    @property
    def first_error(self) -> int | None:
        """Index of the first pool step rated -1; None when there is none."""
        return first_error(self.pool_ratings)

    @property
    def has_error(self) -> bool:
        """Some step is wrong: a pool step rated -1, or a -1 verdict on the path."""
        return any(map(is_error, self.pool_ratings)) or any(map(is_error, self.ratings))

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
            if is_error(step.rating):
                break
        return tuple(walked)

    def derived_finish_reason(self) -> str | None:
        """What the ratings say the task ended as: found_error when a step is wrong, solution
        when every pool step is rated and none is; None when they say neither."""
        if self.has_error:
            return FOUND_ERROR
        ratings = self.pool_ratings
        return SOLUTION if ratings and None not in ratings else None

    def contradiction(self, finish_reason: str | None) -> str | None:
        """Why `finish_reason` contradicts the ratings; None when it does not.

        give_up and bad_problem are the annotator's judgement of the task, which no rating
        contradicts.
        """
        if finish_reason == FOUND_ERROR and not self.has_error:
            return "finished as found_error, but no step is rated -1"
        if finish_reason == SOLUTION and self.has_error:
            return f"finished as solution, but step {(self.first_error or 0) + 1} is rated -1"
        return None

    def withheld(self, finish_reason: str | None, *, trainable: bool = True) -> str | None:
        """Why these labels never leave Stepwise, in an export or as training rows; None when they may.

        "bad_problem": the annotator judged the problem itself broken, which says nothing about
        its steps (`trainable=False` keeps it, for readers of a solution's decided first error,
        which skip it themselves); "inconsistent": the finish reason contradicts the ratings
        (`contradiction`), so which of the two is true is unknown.
        """
        if trainable and finish_reason == BAD_PROBLEM:
            return "bad_problem"
        if self.contradiction(finish_reason):
            return "inconsistent"
        return None

    def decides_first_error(self, finish_reason: str | None) -> bool:
        """Whether this finished annotation decides the first error in the pool's own steps
        (`first_error`; None: every step is right): finished as solution / found_error without
        contradicting its ratings, and every step before the first -1 rated (every step, when
        there is none)."""
        if finish_reason not in (SOLUTION, FOUND_ERROR) or self.contradiction(finish_reason):
            return False
        ratings = self.pool_ratings
        end = len(ratings) if self.first_error is None else self.first_error
        return bool(ratings) and None not in ratings[:end]

    def contradicts_grade(self, finish_reason: str | None, final_answer_correct: bool | None) -> str | None:
        """Why these labels and the automatic grade of the solution's final answer cannot both be
        right; None when they can. Every step rated and none -1, yet the answer grades as wrong:
        an error missed, or a grader that misread the answer. A reviewer decides
        (annotate.labeling.reviewing); ProcessBench, whose rows state both, leaves it out. A
        wrong step in a solution whose answer grades as right is no contradiction."""
        if final_answer_correct is False and self.decides_first_error(finish_reason) and self.first_error is None:
            return "every step is rated correct, but the final answer grades as wrong"
        return None


def chosen_at_submit(ratings: Sequence[int | None], rewritten: Sequence[bool], finish_reason: str) -> list[int | None]:
    """PRM800K's `chosen_completion` of each step a submitted task keeps (one completion shown
    per step, index 0): the completion the annotator went on from.

    None where they went on from their own text (a rewritten step: the human completion
    continues the path) and at the -1 a found_error task ends on (nobody went on from it); 0
    everywhere else, the steps rated after a rewrite included, as PRM800K's phase-1 lines have them.
    """
    last = len(ratings) - 1
    return [None if wrote or (i == last and finish_reason == FOUND_ERROR and is_error(rating)) else 0
            for i, (rating, wrote) in enumerate(zip(ratings, rewritten, strict=True))]


def step_verdict(step_label: Any) -> StepVerdict:
    """The verdict of one labeled step (the rule, and what each consumer reads of a rewritten
    step, are the module docstring's): a rewritten step's verdict is its rewrite's, +1 unless a
    reviewer rated it, and the pool's text it replaced keeps its -1 among `alternatives`."""
    completions = sorted(step_label.completions.all(), key=lambda c: c.index)
    chosen = next((c for c in completions if c.index == step_label.chosen_completion), None)
    if chosen is not None:
        return _from_completion(step_label.index, chosen, "chosen", completions)
    human = step_label.human_completion
    if human is not None:
        text, rating, flagged = _human(human)
        return StepVerdict(step_label.index, text, Rating.POSITIVE if rating is None else rating, flagged, "human",
                           None, _others(completions, None))
    stopped = next((c for c in completions if is_error(c.rating)), completions[0] if completions else None)
    if stopped is None:
        return StepVerdict(step_label.index, "", None, False, "stopped", None)
    return _from_completion(step_label.index, stopped, "stopped", completions)


def held(step_labels: Any) -> list:
    """The step labels a submitted annotation holds, in step order: up to and including the first
    step nobody went on from (the module docstring's "where a line ends"). While a task is being
    labeled no step is gone on from yet: this reads submitted annotations only."""
    labels = sorted(step_labels, key=lambda label: label.index)
    end = next((i for i, label in enumerate(labels) if ends_line(label)), len(labels) - 1)
    return labels[:end + 1]


def ends_line(step_label: Any) -> bool:
    """Whether nobody went on from this step: neither a chosen nor a human completion."""
    return step_label.chosen_completion is None and step_label.human_completion is None


def verdicts(annotation: Any) -> Verdicts:
    """Every step's verdict of one annotation, in step order, with its solution's own steps."""
    labels = held(annotation.step_labels.all())
    pool = tuple(step.text for step in sorted(annotation.solution.steps.all(), key=lambda step: step.index))
    return Verdicts(getattr(annotation, "id", None), tuple(step_verdict(label) for label in labels), pool)


def verdicts_by_annotation(annotations) -> dict[int, Verdicts]:
    """Verdicts of every annotation in a queryset, keyed by annotation id (three extra queries)."""
    prefetched = annotations.select_related("solution").prefetch_related("step_labels__completions", "solution__steps")
    return {annotation.pk: verdicts(annotation) for annotation in prefetched.iterator(chunk_size=2000)}


def _same(a: str, b: str) -> bool:
    return a == b or a.strip() == b.strip()


def _from_completion(index: int, completion: Any, source: Source, completions: Sequence[Any]) -> StepVerdict:
    return StepVerdict(index, completion.text, completion.rating, bool(completion.flagged), source, completion.index,
                       _others(completions, completion.index))


def _others(completions: Sequence[Any], carrier: int | None) -> tuple[Shown, ...]:
    return tuple(Shown(c.index, c.text, c.rating, bool(c.flagged)) for c in completions if c.index != carrier)


def _human(human: object) -> tuple[str, int | None, bool]:
    if isinstance(human, dict):
        rating = human.get("rating")
        return str(human.get("text") or ""), rating if is_rating(rating) else None, bool(human.get("flagged"))
    return str(human), None, False
