"""What the labeling page shows of the model's view of a task, and what each rating keeps of it.

The project chooses (`LabelingConfig.assistance`): `blind` shows nothing and keeps nothing;
`second_look` asks once, after a rating the model disagrees with by more than
`assistance_margin`, whether to look again, and keeps the first and the final answer;
`suggest` shows the model's first-error guess from the start.

The model's view is the current PRM's probability that each step is right, read where scoring
stores its scores, so it changes the moment a version is made current. The labeling side never
imports the scoring side (import-linter's layers): scoring gives it the query when the apps are
ready (`read_model_view_with`, scoring.apps), and it runs that query like its own. Without one,
no step has a view. It is one model's opinion, replaced with the model, not a label to train on.

A rating's record, `StepLabel.assistance` (null when nothing was shown: a blind project, an
imported line), goes out with the step in the PRM800K export, so a dataset can be filtered by
what its annotators saw:
``{"mode": "second_look", "model_p": 0.1, "shown": "second_look", "first_rating": 1,
"final_rating": -1}``, ``{"mode": "second_look", "model_p": 0.8, "shown": "none"}``,
``{"mode": "suggest", "model_p": 0.3, "shown": "suggestion", "model_first_error": 2}``. The other
exports carry a row's `summary` of them.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from annotate.models import Assistance, LabelingConfig
from infra import statements
from steps import arithmetic
from steps.ratings import is_good

# ProcessBench's rule for a PRM's first error: the first step below this probability.
GUESS_THRESHOLD = 0.5
SHOWN_SECOND_LOOK = "second_look"


@dataclass(frozen=True)
class Suggestion:
    """The model's first-error guess as the page shows it: a step index, or None (no error)."""

    first_error: int | None


_model_view: statements.Compiled | None = None


def read_model_view_with(query: Callable[[int], QuerySet]) -> None:
    """Where the model's view comes from: `query(solution_id)`, the current model's P(right) of
    each step of the solution in step order, one column (None: not scored). Compiled once per
    connection, as the labeling path's own statements are."""
    global _model_view
    _model_view = statements.Compiled(query)


def model_ps(*, solution_id: int) -> list[float | None]:
    """The current model's P(right) of each step of the solution, in order (None: not scored);
    empty when no model's view is given."""
    if _model_view is None:
        return []
    return [p for (p,) in _model_view.rows(solution_id=solution_id)]


def suggestion(ps: Sequence[float | None]) -> Suggestion | None:
    """The model's guess from its step scores; None (nothing to show) unless every step is scored."""
    if not ps or any(p is None for p in ps):
        return None
    return Suggestion(arithmetic.predicted_first_error([p for p in ps if p is not None], GUESS_THRESHOLD))


def suggestion_for(*, solution_id: int, config: LabelingConfig) -> Suggestion | None:
    """What a task's page shows of the model from the start: a guess under `suggest`, else None."""
    if config.assistance != Assistance.SUGGEST:
        return None
    return suggestion(model_ps(solution_id=solution_id))


def doubts(rating: int, p: float | None, margin: float) -> bool:
    """Whether the model disagrees with a rating by more than `margin`. A rating reads as a
    probability the way training reads it by default (neutral="positive"): +1 and 0 as 1, -1 as 0."""
    return p is not None and abs((1.0 if is_good(rating, neutral_is_good=True) else 0.0) - p) > margin


def is_waiting(record: dict | None, rating: int | None) -> bool:
    """A rated step whose second look was asked and not answered yet."""
    if not record or rating is None:
        return False
    return record.get("shown") == SHOWN_SECOND_LOOK and record.get("final_rating") is None


def waiting_index(records: Sequence[dict | None], ratings: Sequence[int | None]) -> int | None:
    """The step whose second look the annotator must answer before anything else, if any."""
    return next((i for i, (record, rating) in enumerate(zip(records, ratings)) if is_waiting(record, rating)), None)


def record(*, config: LabelingConfig, prior: dict | None, rating: int, index: int,
           ps: Sequence[float | None]) -> dict | None:
    """What a rating of step `index` keeps: `prior` (the step's record) updated. A rating that
    answers an open second look is its final answer, whatever the project asks now; a step is
    asked once."""
    if prior and prior.get("shown") == SHOWN_SECOND_LOOK:
        return prior if prior.get("final_rating") is not None else {**prior, "final_rating": rating}
    p = ps[index] if index < len(ps) else None
    if config.assistance == Assistance.SECOND_LOOK:
        kept: dict[str, Any] = {"mode": config.assistance, "model_p": p, "shown": "none"}
        if doubts(rating, p, config.assistance_margin):
            kept.update(shown=SHOWN_SECOND_LOOK, first_rating=rating, final_rating=None)
        return kept
    if config.assistance == Assistance.SUGGEST:
        guess = suggestion(ps)
        if guess is None:
            return {"mode": config.assistance, "model_p": p, "shown": "none"}
        return {"mode": config.assistance, "model_p": p, "shown": "suggestion", "model_first_error": guess.first_error}
    return prior  # blind: nothing shown, nothing kept


def summary(records: Iterable[dict | None]) -> dict:
    """What the annotators behind some ratings saw: `mode`, the project's assistance when they rated
    ("blind" where a rating kept no record, "mixed" when the ratings differ), and `second_look`,
    whether any rating got the "look again?" prompt."""
    records = list(records)
    modes = {record.get("mode", Assistance.BLIND) if record else Assistance.BLIND for record in records}
    return {
        "mode": str(modes.pop()) if len(modes) == 1 else "mixed" if modes else str(Assistance.BLIND),
        "second_look": any(record and record.get("shown") == SHOWN_SECOND_LOOK for record in records),
    }
