"""The benchmark's numbers: curves over seeds, the data-efficiency ratio, and the plot."""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path

from infra import charts

# The curve metrics of a round; higher is better for all.
METRICS = ("paired_auc", "step_auc", "solution_auc", "processbench_f1", "best_of_n")
TITLES = {"paired_auc": "paired AUC (vs reference step)", "step_auc": "step AUC",
          "solution_auc": "solution AUC (product)",
          "processbench_f1": "ProcessBench F1", "best_of_n": "best-of-N accuracy (product)",
          "wrong_share": "share of labeled solutions with a wrong answer"}


# --- curves, spread and efficiency ----------------------------------------------------------------


def _mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    xs = [v for v in values if v is not None]
    if not xs:
        return None, None
    mean = sum(xs) / len(xs)
    return mean, (math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0)


def summarize(runs: list[list[dict]]) -> dict:
    """Per metric: mean and sample std over seeds at each label count, plus the per-seed values."""
    labels = [point["labels"] for point in runs[0]]
    out: dict = {"labels": labels, "seeds": len(runs)}
    for metric in (*METRICS, "ece", "wrong_share", "labeled_steps"):
        per_seed = [[point[metric] for point in run] for run in runs]
        stats = [_mean_std([seed[i] for seed in per_seed]) for i in range(len(labels))]
        out[metric] = {"mean": [m for m, _ in stats], "std": [s for _, s in stats], "per_seed": per_seed}
    return out


def labels_to_reach(labels: Sequence[int], values: Sequence[float | None], level: float) -> float | None:
    """Labels at which the curve's running maximum first reaches `level` (linear in between)."""
    best, previous = -math.inf, None
    for n, value in zip(labels, values):
        value = -math.inf if value is None else value
        if max(best, value) >= level:
            if previous is None or best == -math.inf:
                return float(n)
            x0, y0 = previous
            return x0 + (n - x0) * (level - y0) / (value - y0) if value > y0 else float(n)
        best = max(best, value)
        previous = (n, best)
    return None


def efficiency(curves: dict[str, list[list[dict]]], *, resamples: int = 500, seed: int = 0) -> dict:
    """Labels random needs to reach a quality level / labels the strategy needs, per metric.

    On the curves averaged over seeds (one seed's curve is too noisy to cross a level
    cleanly). The levels are random's quality at each label count after the shared first
    pick; the ratios at the levels are combined by geometric mean. A level the strategy
    never reaches counts as reached at the last label count, which makes its ratio an upper
    bound (`unreached` says how many). The spread comes from resampling seeds (paired:
    random and the strategy share each seed's first pick): std and 5-95 % interval.
    """
    labels = [point["labels"] for point in curves["random"][0]]
    n_seeds = len(curves["random"])
    rng = random.Random(seed)
    draws = [[rng.randrange(n_seeds) for _ in range(n_seeds)] for _ in range(resamples)] if n_seeds > 1 else []
    out: dict = {}
    for strategy, runs in curves.items():
        out[strategy] = {}
        for metric in METRICS:
            point = _ratio(labels, curves["random"], runs, metric, range(n_seeds))
            spread = [r["ratio"] for d in draws if (r := _ratio(labels, curves["random"], runs, metric, d))["ratio"]]
            spread.sort()
            out[strategy][metric] = point | {
                "std": _mean_std(spread)[1] if spread else 0.0,
                "interval_90": (
                    [spread[int(0.05 * (len(spread) - 1))], spread[int(0.95 * (len(spread) - 1))]] if spread else None
                ),
            }
    return out


def _ratio(labels: Sequence[int], random_runs, runs, metric: str, seeds) -> dict:
    seeds = list(seeds)

    def mean_curve(source):
        return [_mean_std([source[k][i][metric] for k in seeds])[0] for i in range(len(labels))]

    random_curve, curve = mean_curve(random_runs), mean_curve(runs)
    levels, ratios, unreached, best = [], [], 0, -math.inf
    for value in random_curve[1:]:
        best = max(best, -math.inf if value is None else value)
        if best == -math.inf:
            continue
        need_random = labels_to_reach(labels, random_curve, best)
        need = labels_to_reach(labels, curve, best)
        if need is None:
            unreached, need = unreached + 1, float(labels[-1])
        levels.append(best)
        ratios.append(need_random / need)
    ratio = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
    return {"ratio": ratio, "levels": levels, "per_level": ratios, "unreached": unreached}


# --- the plot ---------------------------------------------------------------------------------


def plot(result: dict, path: Path) -> Path:
    """Learning curves (mean and +-1 std over seeds) with the baselines, one panel per metric, as an SVG
    file (`path` with the suffix .svg, returned)."""
    panels = []
    for metric in (*METRICS, "wrong_share"):
        series = []
        for strategy, summary in result["strategies"].items():
            rows = [(x, m, s or 0.0) for x, m, s in zip(summary["labels"], summary[metric]["mean"],
                                                          summary[metric]["std"]) if m is not None]
            series.append(charts.Series(strategy, [(x, m) for x, m, _ in rows],
                                        band=[(x, m - s, m + s) for x, m, s in rows]))
        rules = [charts.Rule(name.replace("_", "-"), values[metric], dash=dash)
                 for (name, values), dash in zip(result["baselines"].items(), ("1 3", "4 3"))
                 if metric in METRICS and values.get(metric) is not None]
        panels.append(charts.line_chart(series, rules=rules, x_label="labeled solutions",
                                        y_label=metric.replace("_", " "), title=TITLES.get(metric, metric),
                                        width=420, height=260))
    run = result["settings"]
    title = (f"{run.get('pool', 'pool')}: {result['pool']['solutions']} solutions, held-out "
             f"{result['held_out']['solutions']}; mean ± std over {len(run['seeds'])} seeds; "
             f"backbone {Path(str(run.get('backbone', '?'))).name}, layer {run['layer']}")
    return charts.write_svg(charts.grid(panels, columns=3, title=title), path.with_suffix(".svg"))
