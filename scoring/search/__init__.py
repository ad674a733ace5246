"""PRM-guided search: best-of-N, step-level beam search, MCTS and ACA best-of-N.

Pure functions over a `Generator` (scoring.generation.generators) and a scorer, a callable
`(problem, steps) -> [StepProbability per step]` (`prm_scorer(loaded_prm)`), with no Django.
Every method spends from one `Compute` account against one `Budget` (generated tokens,
PRM calls) that it never exceeds, and returns a `SearchResult`: the chosen solution (steps,
step scores, answer), the finished candidates and the compute spent.

    result = search.run(method="beam", problem=q, generator=g, scorer=search.prm_scorer(prm),
                        budget=search.Budget(max_tokens=2000), beam_width=4)
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import fields

from scoring.search.beam import beam_search
from scoring.search.compute import Budget, BudgetExhausted, Compute, Scorer, prm_scorer
from scoring.search.mcts import mcts
from scoring.search.paths import Path, SearchResult, StepOptions
from scoring.search.sampling import ACA_DEFAULTS, aca_best_of_n, aca_should_stop, best_of_n, confidence_bounds

METHODS: dict[str, Callable[..., SearchResult]] = {
    "best_of_n": best_of_n, "beam": beam_search, "mcts": mcts, "aca": aca_best_of_n,
}

__all__ = [
    "ACA_DEFAULTS", "METHODS", "Budget", "BudgetExhausted", "Compute", "Path", "Scorer", "SearchResult",
    "StepOptions", "aca_best_of_n", "aca_should_stop", "beam_search", "best_of_n", "confidence_bounds", "mcts",
    "method_arguments", "prm_scorer", "run",
]
# What a caller supplies itself rather than as an option.
_WIRING = {"problem", "generator", "scorer", "budget", "options"}
STEP_OPTIONS = tuple(f.name for f in fields(StepOptions) if f.name != "template")


def run(*, method: str, **arguments) -> SearchResult:
    """Run the method called `method` ("best_of_n", "beam", "mcts", "aca") with its own keyword arguments."""
    if method not in METHODS:
        raise ValueError(f"unknown search method {method!r}; expected one of {', '.join(METHODS)}")
    return METHODS[method](**arguments)


def method_options(method: str) -> tuple[str, ...]:
    """The option names `method` takes: its own parameters and the step options."""
    if method not in METHODS:
        raise ValueError(f"unknown search method {method!r}; expected one of {', '.join(METHODS)}")
    own = [name for name in inspect.signature(METHODS[method]).parameters if name not in _WIRING]
    return (*own, *STEP_OPTIONS)


def method_arguments(method: str, options: dict) -> dict:
    """Keyword arguments for `run` from a flat options dict (a request body, command flags).

    An option the method does not take is refused by name, so a typo never runs silently
    with a default.
    """
    allowed = method_options(method)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"{method}: unknown option(s) {', '.join(unknown)}; it takes {', '.join(allowed)}")
    step = {k: v for k, v in options.items() if k in STEP_OPTIONS}
    own = {k: v for k, v in options.items() if k not in STEP_OPTIONS}
    return {**own, "options": StepOptions(**step)}
