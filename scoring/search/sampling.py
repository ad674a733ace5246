"""Whole-solution methods: best-of-N and ACA best-of-N (adaptive sampling with a BetaPRM head).

Both sample complete solutions, score each once with the PRM and pick the best by the
chosen aggregation. Best-of-N takes a fixed N. ACA (the BetaPRM paper) starts with `n0`
samples and adds `m` at a time up to `n_total`, stopping as soon as the best candidate's
lower bound mu - lam*sigma beats every other candidate's upper bound mu + lam*sigma:
more samples could then only change the pick if the PRM were wrong by more than lam sigmas.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypedDict

from scoring.core.prm import StepProbability
from scoring.core.prm import aggregate as aggregate_all
from scoring.generation.generators import Generator, SamplingParams
from scoring.search.compute import Budget, BudgetExhausted, Compute, Scorer
from scoring.search.paths import Path, SearchResult, StepOptions, best_path, whole_solution
from steps import arithmetic


class AcaDefaults(TypedDict):
    n0: int
    n_total: int
    m: int
    lam: float


ACA_DEFAULTS: AcaDefaults = {"n0": 4, "n_total": 16, "m": 4, "lam": 1.0}


def sample_solutions(
    *, problem: str, generator: Generator, scorer: Scorer, compute: Compute, n: int,
    max_tokens: int, options: StepOptions,
) -> list[Path]:
    """Up to `n` scored solutions, as many as the budget allows (fewer, never more)."""
    fit = compute.samples_that_fit(n, max_tokens)
    if not fit:
        raise BudgetExhausted(f"no solution of up to {max_tokens} tokens fits in the {compute.tokens_left()} left")
    seed = None if options.seed is None else options.seed + compute.generator_calls
    params = SamplingParams(temperature=options.temperature, top_p=options.top_p, max_tokens=max_tokens,
                            n=fit, seed=seed)
    paths = []
    for sample in compute.generate(generator, [options.prompt(problem, ())], params)[0]:
        path = whole_solution(sample.text, tokens=sample.completion_tokens)
        if path.steps:
            path = replace(path, scores=tuple(compute.score(scorer, problem, path.steps)))
        paths.append(path)
    return paths


def best_of_n(
    *, problem: str, generator: Generator, scorer: Scorer, budget: Budget | None = None, n: int = 8,
    aggregation: str = "min", max_solution_tokens: int = 512, options: StepOptions | None = None,
) -> SearchResult:
    """Sample `n` solutions (fewer if the budget runs out), return the best by `aggregation`."""
    arithmetic.check_aggregation(aggregation)
    options, compute = options or StepOptions(), Compute(budget or Budget())
    paths: list[Path] = []
    stopped = "done"
    try:
        while len(paths) < n:
            paths += sample_solutions(problem=problem, generator=generator, scorer=scorer, compute=compute,
                                      n=n - len(paths), max_tokens=max_solution_tokens, options=options)
    except BudgetExhausted:
        stopped = "budget"
    return SearchResult("best_of_n", aggregation, best_path(paths, aggregation), paths, compute.as_dict(),
                        stopped, {"n": len(paths)})


def confidence_bounds(scores: Sequence[StepProbability], aggregation: str, lam: float) -> tuple[float, float]:
    """(mu - lam*sigma, mu + lam*sigma) of one solution: mu by `aggregation`, sigma its mean step sigma."""
    sigma = aggregate_all(scores)["sigma"]
    if sigma is None:
        raise ValueError("ACA needs a distributional PRM (a beta head): these scores have no sigma")
    mu = Path(scores=tuple(scores)).value(aggregation)
    return mu - lam * sigma, mu + lam * sigma


def aca_should_stop(candidates: Sequence[Sequence[StepProbability]], *, aggregation: str = "min",
                    lam: float = 1.0) -> bool:
    """The ACA stopping rule: the best candidate's lower bound beats every other's upper bound."""
    if len(candidates) < 2:
        return len(candidates) == 1
    bounds = [confidence_bounds(scores, aggregation, lam) for scores in candidates]
    means = [Path(scores=tuple(scores)).value(aggregation) for scores in candidates]
    best = max(range(len(candidates)), key=means.__getitem__)
    return all(bounds[best][0] > upper for i, (_, upper) in enumerate(bounds) if i != best)


def aca_best_of_n(
    *, problem: str, generator: Generator, scorer: Scorer, budget: Budget | None = None,
    n0: int = ACA_DEFAULTS["n0"], n_total: int = ACA_DEFAULTS["n_total"], m: int = ACA_DEFAULTS["m"],
    lam: float = ACA_DEFAULTS["lam"], aggregation: str = "min", max_solution_tokens: int = 512,
    options: StepOptions | None = None,
) -> SearchResult:
    """Adaptive best-of-N: n0 samples, then m more at a time until one dominates or n_total."""
    arithmetic.check_aggregation(aggregation)
    if not 1 <= n0 <= n_total or m < 1:
        raise ValueError(f"ACA needs 1 <= n0 <= n_total and m >= 1 (got n0={n0}, n_total={n_total}, m={m})")
    options, compute = options or StepOptions(), Compute(budget or Budget())
    paths: list[Path] = []
    rounds: list[dict[str, Any]] = []
    stopped = "done"
    want = n0
    try:
        while True:
            while len(paths) < want:
                paths += sample_solutions(problem=problem, generator=generator, scorer=scorer, compute=compute,
                                          n=want - len(paths), max_tokens=max_solution_tokens, options=options)
            scored = [p.scores for p in paths if p.scores]
            dominated = aca_should_stop(scored, aggregation=aggregation, lam=lam)
            rounds.append({"samples": len(paths), "dominates": dominated})
            if dominated or len(paths) >= n_total:
                break
            want = min(n_total, len(paths) + m)
    except BudgetExhausted:
        stopped = "budget"
    details = {"n": len(paths), "n0": n0, "n_total": n_total, "m": m, "lam": lam, "rounds": rounds,
               "early_stop": bool(rounds) and rounds[-1]["dominates"] and len(paths) < n_total}
    return SearchResult("aca", aggregation, best_path(paths, aggregation), paths, compute.as_dict(), stopped, details)
