"""Step-level beam search guided by the PRM.

Each round, every live beam is extended by `expansions` sampled next steps (the first
round samples `beam_width * expansions` from the empty solution, so width is reached at
once); each child is scored by the PRM and the best `beam_width` unfinished children live
on, ranked by `aggregation` over their step scores. With `lookahead=1` a child is ranked by
the score it would have one greedy (temperature 0) step later, as in "Scaling LLM
Test-Time Compute" (Snell et al.); the lookahead step is spent, never kept. The search ends
when `beam_width` solutions are complete, no beam is left, or the budget is spent. The
best `beam_width` children take the free places; those that are complete are done. So a
width of 1 without lookahead is greedy search by PRM score.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from scoring.generation.generators import Generator, SamplingParams
from scoring.search.compute import Budget, BudgetExhausted, Compute, Scorer
from scoring.search.paths import Path, SearchResult, StepOptions, best_path, extended
from steps import arithmetic


def next_steps(
    *, problem: str, paths: list[Path], n: int, generator: Generator, compute: Compute, options: StepOptions,
    greedy: bool = False,
) -> list[list[Path]]:
    """`n` one-step extensions of each path (unscored), in path order; refused past the budget."""
    seed = None if options.seed is None else options.seed + compute.generator_calls
    params = SamplingParams(
        temperature=0.0 if greedy else options.temperature, top_p=options.top_p,
        max_tokens=options.max_step_tokens, stop=(options.delimiter,), n=n, seed=seed,
    )
    rows = compute.generate(generator, [options.prompt(problem, p.steps) for p in paths], params)
    return [[extended(path, s.text, tokens=s.completion_tokens, options=options) for s in row]
            for path, row in zip(paths, rows)]


def scored(path: Path, *, problem: str, scorer: Scorer, compute: Compute) -> Path:
    """The path with the PRM's score of each of its steps (one call; a causal PRM re-reads the prefix)."""
    if not path.steps or len(path.scores) == len(path.steps):
        return path
    return replace(path, scores=tuple(compute.score(scorer, problem, path.steps)))


def beam_search(
    *, problem: str, generator: Generator, scorer: Scorer, budget: Budget | None = None, beam_width: int = 4,
    expansions: int = 4, aggregation: str = "min", lookahead: int = 0, options: StepOptions | None = None,
) -> SearchResult:
    """Beam search over steps (module docstring); the best complete solution, else the best partial."""
    arithmetic.check_aggregation(aggregation)
    if beam_width < 1 or expansions < 1 or lookahead not in (0, 1):
        raise ValueError(f"beam search needs beam_width >= 1, expansions >= 1, lookahead 0 or 1 "
                         f"(got {beam_width}, {expansions}, {lookahead})")
    options, compute = options or StepOptions(), Compute(budget or Budget())
    beams: list[Path] = [Path()]
    complete: list[Path] = []
    trace: list[list[dict[str, Any]]] = []
    stopped = "done"
    try:
        while beams and len(complete) < beam_width:
            # The first round samples the whole width from the empty solution; later rounds, each beam's
            # expansions. Beams that do not fit are dropped lowest-ranked first (they come last).
            n = expansions if trace else compute.samples_that_fit(beam_width * expansions, options.max_step_tokens)
            fit = compute.samples_that_fit(len(beams) * n, options.max_step_tokens) // n if n else 0
            if fit < 1:
                raise BudgetExhausted("no beam's expansions fit in the tokens left")
            children = [c for row in next_steps(problem=problem, paths=beams[:fit], n=n, generator=generator,
                                               compute=compute, options=options) for c in row]
            ranked = _rank(children, problem=problem, scorer=scorer, compute=compute, generator=generator,
                           aggregation=aggregation, lookahead=lookahead, options=options)
            trace.append([{"value": value, "complete": child.complete} for child, value in ranked])
            # The best children fill the free places; a complete one is done, the others live on.
            kept = [child for child, _ in ranked][: beam_width - len(complete)]
            complete += [child for child in kept if child.complete]
            beams = [child for child in kept if not child.complete]
    except BudgetExhausted:
        stopped = "budget"
    best = best_path(complete, aggregation) or best_path(beams, aggregation)
    return SearchResult("beam", aggregation, best, complete, compute.as_dict(), stopped,
                        {"beam_width": beam_width, "expansions": expansions, "lookahead": lookahead, "rounds": trace})


def _rank(children: list[Path], *, problem: str, scorer: Scorer, compute: Compute, generator: Generator,
          aggregation: str, lookahead: int, options: StepOptions) -> list[tuple[Path, float]]:
    """Children scored (as many as the PRM budget allows) and sorted best first, with their ranking value."""
    ranked: list[tuple[Path, float]] = []
    for child in children:
        try:
            child = scored(child, problem=problem, scorer=scorer, compute=compute)
            value = child.value(aggregation)
            if lookahead and not child.complete:
                value = _lookahead_value(child, problem=problem, scorer=scorer, compute=compute,
                                         generator=generator, aggregation=aggregation, options=options)
        except BudgetExhausted:
            if not ranked:
                raise
            break
        ranked.append((child, value))
    # sorted is stable: equal values keep generation order, so runs are repeatable.
    return sorted(ranked, key=lambda pair: -pair[1])


def _lookahead_value(child: Path, *, problem: str, scorer: Scorer, compute: Compute, generator: Generator,
                     aggregation: str, options: StepOptions) -> float:
    ahead = next_steps(problem=problem, paths=[child], n=1, generator=generator, compute=compute,
                       options=options, greedy=True)[0][0]
    if len(ahead.steps) == len(child.steps):
        return child.value(aggregation)  # the generator ended the text: nothing to look at
    return scored(ahead, problem=problem, scorer=scorer, compute=compute).value(aggregation)
