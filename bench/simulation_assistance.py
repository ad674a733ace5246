"""What a project's assistance setting buys on gold items: misses caught, false alarms, seconds.

A simulated annotator labels tasks whose first error is known (gold items) by the PRM800K
rule: steps in order, stop at the first step rated -1. It misses a first error (rates it +1)
with probability `miss` and marks a right step -1 with probability `false_alarm`; steps
after a missed error are locally right (the generated domain carries the wrong value on), so
the only thing it can do there is a false alarm.

What each mode adds, with the product's own rules (`annotate.labeling.assistance`):
  blind        nothing.
  second_look  after a rating the model doubts (`assistance.doubts`, by more than `margin`),
               the annotator looks again (`seconds_per_look`): a wrong rating is fixed with
               probability `recover`, a right one is changed to the model's view with
               probability `talked_out`.
  suggest      the model's first-error guess (`assistance.suggestion`) is read first
               (`seconds_per_suggestion`); at the guessed step a miss is caught with
               probability `recover`, and a right step is accepted as the error with
               probability `anchor`.
Every mode sees the same random draws per task (common random numbers), so a difference
between modes is the mode's, not the dice's. A miss is "caught" when blind missed it and the
mode's final first error is the true one.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from annotate.labeling import assistance
from annotate.models import Assistance
from steps.ratings import Rating

MODES = tuple(Assistance.values)


@dataclass(frozen=True)
class Annotator:
    """The simulated annotator's error rates and time costs (stated, not measured on people)."""

    miss: float = 0.2
    false_alarm: float = 0.02
    recover: float = 0.6
    talked_out: float = 0.05
    anchor: float = 0.1
    seconds_per_step: float = 6.0
    seconds_per_look: float = 10.0
    seconds_per_suggestion: float = 3.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value < 0 or (not name.startswith("seconds") and value > 1):
                raise ValueError(f"annotator {name}={value}: a probability in [0, 1] or seconds >= 0")


@dataclass(frozen=True)
class GoldTask:
    first_error: int | None
    ps: list[float]  # the model's P(step right), one per step


@dataclass(frozen=True)
class Outcome:
    first_error: int | None  # the labeled first error (None: all rated right)
    seconds: float
    looks: int


def _first_ratings(task: GoldTask, draws: Sequence[float], person: Annotator) -> list[Rating]:
    """What the annotator would rate each step unaided (right or wrong: this annotator never says 0)."""
    out = []
    for i, u in enumerate(draws):
        if i == task.first_error:
            out.append(Rating.POSITIVE if u < person.miss else Rating.NEGATIVE)
        else:
            out.append(Rating.NEGATIVE if u < person.false_alarm else Rating.POSITIVE)
    return out


def _other(rating: Rating) -> Rating:
    """The annotator's other answer, after a second look changed their mind."""
    return Rating.POSITIVE if rating.is_error else Rating.NEGATIVE


def label(task: GoldTask, mode: str, person: Annotator, *, margin: float, rng: random.Random) -> Outcome:
    """One task labeled under `mode`; `rng` is seeded per task so every mode draws the same."""
    n = len(task.ps)
    first, second = [rng.random() for _ in range(n)], [rng.random() for _ in range(n)]
    ratings = _first_ratings(task, first, person)
    guess = assistance.suggestion(task.ps) if mode == Assistance.SUGGEST else None
    seconds, looks = (person.seconds_per_suggestion if guess is not None else 0.0), 0
    for i in range(n):
        seconds += person.seconds_per_step
        right = Rating.NEGATIVE if i == task.first_error else Rating.POSITIVE
        rating = ratings[i]
        if mode == Assistance.SECOND_LOOK and assistance.doubts(rating, task.ps[i], margin):
            seconds, looks = seconds + person.seconds_per_look, looks + 1
            change = person.recover if rating != right else person.talked_out
            rating = _other(rating) if second[i] < change else rating
        elif guess is not None and guess.first_error == i and not rating.is_error:
            rating = Rating.NEGATIVE if second[i] < (person.recover if right.is_error else person.anchor) else rating
        if rating.is_error:
            return Outcome(i, seconds, looks)
    return Outcome(None, seconds, looks)


def measure(tasks: Sequence[GoldTask], person: Annotator, *, margin: float = 0.5, seed: int = 0) -> dict:
    """Per mode: share of blind misses caught, false alarms and extra seconds per task, looks per task."""
    outcomes = {mode: [label(t, mode, person, margin=margin, rng=random.Random(seed * 1_000_003 + k))
                       for k, t in enumerate(tasks)] for mode in MODES}
    blind = outcomes[Assistance.BLIND]
    # Missed: the annotator went past the first error (a false alarm before it is not a miss).
    missed = [k for k, (t, o) in enumerate(zip(tasks, blind))
              if t.first_error is not None and (o.first_error is None or o.first_error > t.first_error)]
    report = {}
    for mode, results in outcomes.items():
        false_alarms = sum(_false_alarm(t, o) for t, o in zip(tasks, results))
        report[mode] = {
            "misses_caught": (sum(results[k].first_error == tasks[k].first_error for k in missed) / len(missed)
                              if missed else None),
            "false_alarms_per_task": false_alarms / len(tasks),
            "extra_seconds_per_task": sum(o.seconds - b.seconds for o, b in zip(results, blind)) / len(tasks),
            "looks_per_task": sum(o.looks for o in results) / len(tasks),
            "first_error_accuracy": sum(o.first_error == t.first_error for t, o in zip(tasks, results)) / len(tasks),
        }
    return {"tasks": len(tasks), "blind_misses": len(missed), "modes": report}


def _false_alarm(task: GoldTask, outcome: Outcome) -> bool:
    """A right step labeled as the first error (before the true one, or in a right solution)."""
    return outcome.first_error is not None and (task.first_error is None or outcome.first_error < task.first_error)


def model_quality(tasks: Sequence[GoldTask]) -> dict:
    """How informative the scores are: step AUC on the steps up to the first error, guess accuracy."""
    from scoring.core import evaluation

    scores, labels = [], []
    for t in tasks:
        for i, p in enumerate(t.ps[: (t.first_error + 1) if t.first_error is not None else None]):
            scores.append(p)
            labels.append(0 if i == t.first_error else 1)
    guesses = [assistance.suggestion(t.ps) for t in tasks]
    return {"step_auc": evaluation.roc_auc(scores, labels),
            "guess_accuracy": sum(g is not None and g.first_error == t.first_error for g, t in zip(guesses, tasks))
            / len(tasks)}
