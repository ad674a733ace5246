"""Search curves: accuracy against generated tokens for best-of-N, beam search, MCTS and ACA.

On a problem set with known answers (`eval_search`, `bench/gpu_search_eval.py`), no Django.
Per problem, one pool of `pool_n` whole solutions is sampled and scored once; best-of-N
and majority vote at each N are read from it by `scoring.core.evaluation.best_of_n` (random
subsets of the pool, so the curve is not one lucky ordering), and ACA runs the real
`aca_best_of_n` on the same pool replayed in order (`ReplayGenerator`), so ACA and
best-of-N are compared on the very same samples. Beam search and MCTS generate their own
steps within their token budgets. Tokens are generated tokens per problem, averaged.

ACA's saving is read at equal accuracy: the tokens best-of-N needs to reach ACA's accuracy
(linear between the measured N) against the tokens ACA spent. `plot` draws the curves as an SVG
file through the one chart owner, `infra.charts`.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from infra import charts
from scoring import search
from scoring.core import evaluation
from scoring.generation.generators import Generator, Sample, SamplingParams, Usage
from scoring.search.paths import whole_solution
from steps.grading import grade


@dataclass(frozen=True)
class EvalProblem:
    statement: str
    truth: str | None  # None: the record gave no answer (nothing is graded correct)


@dataclass(frozen=True)
class EvalConfig:
    ns: tuple[int, ...] = (1, 2, 4, 8)
    aggregation: str = "min"
    max_solution_tokens: int = 256
    aca_n0: int = 4
    aca_m: int = 4
    aca_n_total: int = 16
    aca_lams: tuple[float, ...] = (0.5, 1.0, 2.0)
    beams: tuple[tuple[int, int], ...] = ((2, 2), (4, 2))  # (beam width, expansions per beam)
    beam_tokens: int = 1024  # budget per problem
    mcts_simulations: tuple[int, ...] = (4, 8)
    mcts_width: int = 2
    mcts_tokens: int = 1024
    steps: search.StepOptions = field(default_factory=lambda: search.StepOptions(seed=0))
    draws: int = 32

    @property
    def pool_n(self) -> int:
        return max(max(self.ns), self.aca_n_total)

    def as_dict(self) -> dict:
        return {**asdict(self), "steps": {k: v for k, v in asdict(self.steps).items() if k != "template"}}


class ReplayGenerator:
    """A Generator that hands out already generated samples, in order (ACA on best-of-N's pool)."""

    def __init__(self, samples: Sequence[Sample], name: str = "replay"):
        self.samples, self.position, self.name, self.usage = list(samples), 0, name, Usage()

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Sample]]:
        rows = []
        for _ in prompts:
            row = self.samples[self.position : self.position + params.n]
            if len(row) < params.n:
                raise ValueError(f"the replayed pool holds {len(self.samples)} samples; more were asked for")
            self.position += params.n
            self.usage.add(row)
            rows.append(row)
        return rows


def cached(scorer: search.Scorer) -> search.Scorer:
    """The same scores for the same (problem, steps), computed once: methods still count each call."""
    memo: dict = {}

    def score(problem: str, steps: Sequence[str]):
        key = (problem, tuple(steps))
        if key not in memo:
            memo[key] = scorer(problem, steps)
        return memo[key]

    return score


def is_correct(answer: str | None, truth: str | None) -> bool:
    return bool(grade(answer=answer, truth=truth))


def evaluate_problem(problem: EvalProblem, *, index: int, generator: Generator, scorer: search.Scorer,
                     config: EvalConfig) -> dict:
    """Every method on one problem: the pool's candidates, and per run its answer, correctness, tokens."""
    scorer = cached(scorer)
    options = replace(config.steps, seed=None if config.steps.seed is None else config.steps.seed + 1000 * index)
    pool = _sample_pool(problem, generator=generator, config=config, options=options)
    candidates = []
    for sample in pool:
        path = whole_solution(sample.text, tokens=sample.completion_tokens)
        scores = scorer(problem.statement, path.steps) if path.steps else []
        sigma = [s.sigma for s in scores] if scores and scores[0].sigma is not None else None
        candidates.append({"mu": [s.p for s in scores], "sigma": sigma, "answer": path.answer,
                           "correct": is_correct(path.answer, problem.truth), "tokens": sample.completion_tokens})
    runs = []
    common: dict[str, Any] = {
        "problem": problem.statement, "scorer": scorer, "aggregation": config.aggregation, "options": options,
    }
    if candidates and candidates[0]["sigma"] is not None:
        for lam in config.aca_lams:
            result = search.aca_best_of_n(generator=ReplayGenerator(pool), n0=config.aca_n0, m=config.aca_m,
                                          n_total=config.aca_n_total, lam=lam,
                                          max_solution_tokens=config.max_solution_tokens, **common)
            runs.append(_run("aca", f"λ={lam:g}", result, problem))
    for width, expansions in config.beams:
        result = search.beam_search(generator=generator, beam_width=width, expansions=expansions,
                                    budget=search.Budget(max_tokens=config.beam_tokens), **common)
        runs.append(_run("beam", f"{width}×{expansions}", result, problem))
    for simulations in config.mcts_simulations:
        result = search.mcts(generator=generator, simulations=simulations, expansion_width=config.mcts_width,
                             budget=search.Budget(max_tokens=config.mcts_tokens), **common)
        runs.append(_run("mcts", f"{simulations} sims", result, problem))
    return {"problem": problem.statement, "truth": problem.truth, "candidates": candidates, "runs": runs}


def _sample_pool(problem: EvalProblem, *, generator: Generator, config: EvalConfig,
                 options: search.StepOptions) -> list[Sample]:
    params = SamplingParams(temperature=options.temperature, top_p=options.top_p, n=config.pool_n,
                            max_tokens=config.max_solution_tokens, seed=options.seed)
    return generator.generate([options.prompt(problem.statement, ())], params)[0]


def _run(method: str, label: str, result: search.SearchResult, problem: EvalProblem) -> dict:
    answer = result.best.answer if result.best else None
    return {"method": method, "label": label, "answer": answer, "correct": is_correct(answer, problem.truth),
            "tokens": result.compute["generated_tokens"], "prm_calls": result.compute["prm_calls"],
            "stopped": result.stopped, "samples": result.details.get("n")}


def evaluate(problems: Sequence[EvalProblem], *, generator: Generator, scorer: search.Scorer, config: EvalConfig,
             log: Callable[[str], None] = lambda _: None,
             checkpoint: Callable[[dict], None] = lambda _: None) -> dict:
    """The whole report: per-problem records, the curves, and ACA's saving at equal accuracy.

    `checkpoint` gets the report so far after every problem, so a long run that is stopped
    still leaves the problems it finished.
    """
    started, records = time.monotonic(), []
    for index, problem in enumerate(problems):
        records.append(evaluate_problem(problem, index=index, generator=generator, scorer=scorer, config=config))
        log(f"problem {index + 1}/{len(problems)} done ({time.monotonic() - started:.0f} s)")
        if index + 1 < len(problems):
            checkpoint(report_of(records, generator=generator, config=config, started=started))
    return report_of(records, generator=generator, config=config, started=started)


def report_of(records: list[dict], *, generator: Generator, config: EvalConfig, started: float) -> dict:
    curves = curves_of(records, config)
    return {"settings": config.as_dict(), "generator": generator.name, "problems": len(records),
            "seconds": round(time.monotonic() - started, 1), "curves": curves,
            "aca_savings": aca_savings(curves, config), "records": records}


def curves_of(records: Sequence[dict], config: EvalConfig) -> dict[str, list[dict]]:
    """{series: [{"label", "tokens", "accuracy"}]}: best-of-N, majority, oracle, and each method's runs."""
    pools = [[evaluation.Candidate(mu=c["mu"], correct=c["correct"], answer=c["answer"], sigma=c["sigma"])
              for c in r["candidates"]] for r in records]
    mean_sample_tokens = _mean([c["tokens"] for r in records for c in r["candidates"]])
    # N_total is always on the curve: ACA is compared with the fixed best-of-N it replaces.
    ns = sorted(set(config.ns) | {config.aca_n_total})
    table = evaluation.best_of_n(pools, ns=ns, draws=config.draws)["by_n"] if pools else {}
    curves: dict[str, list[dict]] = {}
    for series, column in ((f"best-of-N ({config.aggregation})", config.aggregation),
                           ("majority vote", "majority"), ("oracle (any correct)", "oracle")):
        curves[series] = [{"label": f"N={n}", "tokens": int(n) * mean_sample_tokens, "accuracy": row[column]}
                          for n, row in table.items()]
    for method in ("aca", "beam", "mcts"):
        labels = list(dict.fromkeys(run["label"] for r in records for run in r["runs"] if run["method"] == method))
        points = []
        for label in labels:
            runs = [run for r in records for run in r["runs"] if run["method"] == method and run["label"] == label]
            points.append({"label": label, "tokens": _mean([run["tokens"] for run in runs]),
                           "accuracy": _mean([float(run["correct"]) for run in runs]),
                           "prm_calls": _mean([run["prm_calls"] for run in runs])})
        if points:
            curves[method] = sorted(points, key=lambda p: p["tokens"])
    return curves


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def tokens_to_reach(curve: Sequence[dict], accuracy: float) -> float | None:
    """Tokens a curve (in increasing tokens) needs to reach `accuracy`, linear between points."""
    previous = None
    for point in curve:
        if point["accuracy"] >= accuracy:
            if previous is None or point["accuracy"] == previous["accuracy"]:
                return point["tokens"]
            share = (accuracy - previous["accuracy"]) / (point["accuracy"] - previous["accuracy"])
            return previous["tokens"] + share * (point["tokens"] - previous["tokens"])
        previous = point
    return None


def aca_savings(curves: dict, config: EvalConfig) -> list[dict]:
    """Per ACA point: tokens saved against best-of-N at equal accuracy, and against fixed N = n_total."""
    bon = curves.get(f"best-of-N ({config.aggregation})", [])
    fixed = next((p for p in bon if p["label"] == f"N={config.aca_n_total}"), None)
    rows = []
    for point in curves.get("aca", []):
        equal = tokens_to_reach(bon, point["accuracy"])
        rows.append({
            "label": point["label"], "tokens": point["tokens"], "accuracy": point["accuracy"],
            "best_of_n_tokens_at_equal_accuracy": equal,
            "saved_at_equal_accuracy": None if not equal else 1 - point["tokens"] / equal,
            "saved_vs_fixed_n_total": 1 - point["tokens"] / fixed["tokens"] if fixed and fixed["tokens"] else None,
            "fixed_n_total_accuracy": fixed["accuracy"] if fixed else None,
        })
    return rows


# --- the plot ------------------------------------------------------------------------------------

# (color, dash) per series; the search methods solid, the references dashed and dotted.
STYLES = {"majority vote": ("#888", "4 3"), "oracle (any correct)": ("#aaa", "1 3"), "aca": ("#c0392b", None),
          "beam": ("#1e8e3e", None), "mcts": ("#7d3cb5", None)}


def plot(report: dict, path: Path) -> Path:
    """Accuracy against generated tokens per problem (log scale), one line per method, as an SVG file."""
    series = []
    for name, points in report["curves"].items():
        color, dash = STYLES.get(name, ("#2f5bd3", None))
        series.append(charts.Series(name, [(p["tokens"], p["accuracy"]) for p in points], color=color, dash=dash,
                                    labels=[p["label"] for p in points]))
    title = (f"{report.get('dataset', 'problems')}: {report['problems']} problems, "
             f"generator {report['generator']}, PRM {report.get('model', '?')}")
    svg = charts.line_chart(series, x_label="generated tokens per problem (log)", y_label="accuracy",
                            y_range=(-0.02, 1.02), log_x=True, title=title, width=720, height=400)
    return charts.write_svg(svg, path)
