"""What the labeling page shows of the model's view of a task, and what each rating keeps of it.

The project chooses (`LabelingConfig.assistance`): `blind` shows nothing and keeps nothing;
`second_look` asks once, after a rating the model disagrees with by more than
`assistance_margin`, whether to look again, and keeps the first and the final answer;
`suggest` shows the model's first-error guess from the start.

Under `second_look` a verifier model's word counts too: where the latest judge run's verdict on the
step (annotate.labeling.sources) disagrees with the rating (a neutral 0 counts as good, as exports
count it), the page asks to look again even if the PRM agrees, and shows the judge's critique
beside the model's p. A judge gives a reason the annotator can check, which a bare p does not; and
it is still asked only once per step. The judge is read only after the annotator's own call, never
before, and never in `blind` or `suggest`.

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
``{"mode": "suggest", "model_p": 0.3, "shown": "suggestion", "model_first_error": 2}``. Where the
latest judge run labeled the step, a `second_look` record also has `judge_good` (its verdict),
`judge_p` (its P(good)) and `judge_critique_shown` (whether the page showed its critique: it
disagreed), and with the critique shown, `judge_critique`, the text as shown:
``{"mode": "second_look", "model_p": 0.9, "shown": "second_look", "first_rating": 1,
"final_rating": 1, "judge_good": false, "judge_p": 0.2, "judge_critique_shown": true,
"judge_critique": "7 * 8 is 56, not 54."}``. The other exports carry a row's `summary` of them.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from annotate.labeling import sources
from annotate.labeling.sources import JudgeWord
from annotate.models import Assistance, LabelingConfig
from infra import statements
from steps import arithmetic
from steps.ratings import is_good

# ProcessBench's rule for a PRM's first error: the first step below this probability.
GUESS_THRESHOLD = 0.5
SHOWN_SECOND_LOOK = "second_look"
# The most of a critique a page shows (and a record keeps): a judge's note on one step, not an essay.
MAX_CRITIQUE_SHOWN = 2000


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


def judge_for(*, config: LabelingConfig, prior: dict | None, solution_id: int, index: int) -> JudgeWord | None:
    """The latest judge run's word on the step, read (one query) only where a rating may show it:
    a `second_look` project's rating that does not answer a second look already asked."""
    if config.assistance != Assistance.SECOND_LOOK or _asked(prior):
        return None
    return sources.judge_word(solution_id=solution_id, index=index)


def judge_disagrees(rating: int, judge: JudgeWord | None) -> bool:
    """Whether the judge's verdict differs from the rating's (a neutral 0 reads as good)."""
    return judge is not None and judge.good != is_good(rating, neutral_is_good=True)


def _asked(prior: dict | None) -> bool:
    return prior is not None and prior.get("shown") == SHOWN_SECOND_LOOK


def record(*, config: LabelingConfig, prior: dict | None, rating: int, index: int,
           ps: Sequence[float | None], judge: JudgeWord | None = None) -> dict | None:
    """What a rating of step `index` keeps: `prior` (the step's record) updated. A rating that
    answers an open second look is its final answer, whatever the project asks now; a step is
    asked once. `judge`: the latest judge run's word on the step (`judge_for`)."""
    if prior is not None and _asked(prior):
        return prior if prior.get("final_rating") is not None else {**prior, "final_rating": rating}
    p = ps[index] if index < len(ps) else None
    if config.assistance == Assistance.SECOND_LOOK:
        kept: dict[str, Any] = {"mode": config.assistance, "model_p": p, "shown": "none"}
        judged = judge_disagrees(rating, judge)
        if doubts(rating, p, config.assistance_margin) or judged:
            kept.update(shown=SHOWN_SECOND_LOOK, first_rating=rating, final_rating=None)
        if judge is not None:
            kept.update(judge_good=judge.good, judge_p=judge.soft, judge_critique_shown=judged)
        if judged and judge is not None:
            kept["judge_critique"] = judge.critique[:MAX_CRITIQUE_SHOWN]
        return kept
    if config.assistance == Assistance.SUGGEST:
        guess = suggestion(ps)
        if guess is None:
            return {"mode": config.assistance, "model_p": p, "shown": "none"}
        return {"mode": config.assistance, "model_p": p, "shown": "suggestion", "model_first_error": guess.first_error}
    return prior  # blind: nothing shown, nothing kept


@dataclass(frozen=True)
class SecondLook:
    """What a step's "look again?" prompt says: the model's p (and whether it doubts the rating),
    and the judge's verdict, p and critique where it disagreed (else `critique` is None)."""

    model_p: float | None
    model_doubts: bool
    judge_good: bool | None
    judge_p: float | None
    critique: str | None


def second_look(record: dict | None, margin: float) -> SecondLook:
    """The prompt of a step whose second look is asked, from what its rating kept (whether the
    model doubts it by the project's margin as it stands)."""
    record = record or {}
    p, shown = record.get("model_p"), record.get("judge_critique_shown", False)
    return SecondLook(model_p=p, model_doubts=doubts(record.get("first_rating", 0), p, margin),
                      judge_good=record.get("judge_good") if shown else None,
                      judge_p=record.get("judge_p") if shown else None,
                      critique=record.get("judge_critique", "") if shown else None)


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
