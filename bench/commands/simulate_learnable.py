"""./stepwise bench simulate_learnable [--problems N] [--heldout M] [--budgets B ...] [--seeds S ...]
    [--policies P ...] [--members M] [--output JSON] [--plot SVG] [--json]

Active learning where the scorer can learn the task (bench/learnable_domain.py): generated
arithmetic chains with one error at a known step, an MLP trained from scratch each round.
Per selection policy, held-out quality against labeled solutions over seeds, the labels each
policy needs for random's quality (ratio with a bootstrap interval over seeds), and how often
the simulated rollout labels agree with the known first error. --output is rewritten after
every seed, so a stopped run keeps what it measured.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from django.core.management.base import BaseCommand, CommandError

from bench import learnable_domain, simulation_report, simulation_rollouts
from bench.simulation import stderr_log
from bench.simulation_pool import describe


class Command(BaseCommand):
    help = "Measure selection policies where a small scorer learns the task from the labels."

    def add_arguments(self, parser):
        parser.add_argument("--problems", type=int, default=2500, help="pool problems (right + 2 wrong each)")
        parser.add_argument("--heldout", type=int, default=500, help="held-out problems (right + 3 wrong each)")
        parser.add_argument("--budgets", type=int, nargs="+",
                            default=[50, 100, 200, 400, 700, 1000, 1500, 2000, 3000],
                            help="labeled solutions after each round (the first is a shared random pick)")
        parser.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
        parser.add_argument("--policies", nargs="+", default=[
            "random", "convincing_wrong", "default_mix", "disagreement", "rollout_disagreement"],
            help=f"of {', '.join(learnable_domain.POLICIES)}")
        parser.add_argument("--members", type=int, default=3, help="ensemble size for the ensemble policies")
        parser.add_argument("--output", type=Path, default=None, help="write the JSON here (after every seed)")
        parser.add_argument("--plot", type=Path, default=None, help="SVG of the curves")
        parser.add_argument("--json", action="store_true", help="print the full result as JSON")
        parser.add_argument("--rollout-agreement", action="store_true",
                            help="only label the held-out solutions by Math-Shepherd and OmegaPRM (the product's "
                                 "labelers, a stand-in generator) and compare their first errors with the known ones")

    def handle(self, *args, **options):
        torch.set_num_threads(1)
        settings = self.settings(options)
        pool = learnable_domain.make_problems(options["problems"], variants=2, seed=1)
        held = learnable_domain.make_problems(options["heldout"], variants=3, seed=2)
        if options["rollout_agreement"]:
            self.stdout.write(json.dumps(simulation_rollouts.agreement(held, seed=0), indent=2))
            return
        n_pool = sum(len(p.solutions) for p in pool)
        if settings.budgets[-1] > n_pool:
            raise CommandError(f"--budgets: {settings.budgets[-1]} labels asked, the pool has {n_pool} solutions")
        context = {"pool": describe(pool), "held_out": describe(held),
                   "rollout_agreement": simulation_rollouts.agreement(held, seed=0),
                   "settings": {"budgets": settings.budgets, "policies": settings.policies, "seeds": [],
                                "members": settings.members, "scorer": settings.scorer.__dict__,
                                "problems": options["problems"], "heldout": options["heldout"]}}
        curves: dict[str, list[list[dict]]] = {name: [] for name in settings.policies}
        started = time.monotonic()
        for seed in settings.seeds:
            for name, points in learnable_domain.run_seed(pool, held, settings, seed=seed, log=stderr_log).items():
                curves[name].append(points)
            context["settings"]["seeds"].append(seed)
            result = report(curves, context, seconds=time.monotonic() - started)
            if options["output"]:
                options["output"].write_text(json.dumps(result, indent=1))
        if options["plot"]:
            plot(result, options["plot"])
        self.stdout.write(json.dumps(result, indent=2) if options["json"] else table(result))

    @staticmethod
    def settings(options: dict) -> learnable_domain.Settings:
        unknown = [p for p in options["policies"] if p not in learnable_domain.POLICIES]
        if unknown:
            raise CommandError(f"--policies: unknown {', '.join(unknown)} (use {', '.join(learnable_domain.POLICIES)})")
        if "random" not in options["policies"]:
            raise CommandError("--policies: random is the reference every ratio needs")
        budgets = options["budgets"]
        if len(budgets) < 2 or budgets[0] < 2 or any(b <= a for a, b in zip(budgets, budgets[1:])):
            raise CommandError("--budgets: increasing label counts, at least two, the first at least 2")
        return learnable_domain.Settings(budgets=budgets, policies=options["policies"], seeds=options["seeds"],
                                         members=options["members"])


def report(curves: dict[str, list[list[dict]]], context: dict, *, seconds: float) -> dict:
    return context | {"seconds": round(seconds, 1),
                      "strategies": {name: simulation_report.summarize(runs) for name, runs in curves.items()},
                      "efficiency": simulation_report.efficiency(curves)}


METRICS = ("step_auc", "paired_auc", "processbench_f1")


def plot(result: dict, path: Path) -> Path:
    """The curves as the frozen-backbone benchmark draws them (no baselines: the rule checker is perfect here)."""
    run = result["settings"] | {"pool": "arithmetic chains", "backbone": "MLP from scratch", "layer": "none"}
    return simulation_report.plot(result | {"baselines": {}, "settings": run}, path)


def table(result: dict) -> str:
    labels = next(iter(result["strategies"].values()))["labels"]
    lines = [f"step AUC (mean over {len(result['settings']['seeds'])} seeds) by labeled solutions:",
             "| policy | " + " | ".join(map(str, labels)) + " |", "|---|" + "---|" * len(labels)]
    for name, summary in result["strategies"].items():
        lines.append(f"| {name} | " + " | ".join(f"{m:.3f}" for m in summary["step_auc"]["mean"]) + " |")
    lines += ["", "labels random needs / labels the policy needs at random's levels [90 % bootstrap over seeds]:",
              "| policy | " + " | ".join(METRICS) + " | wrong-answer share at the end |", "|---|---|---|---|---|"]
    for name, ratios in result["efficiency"].items():
        cells = []
        for metric in METRICS:
            r = ratios[metric]
            bound = "≤ " if r["unreached"] else ""
            low, high = r["interval_90"] or (float("nan"), float("nan"))
            cells.append(f"{bound}{r['ratio']:.2f} [{low:.2f}, {high:.2f}]")
        wrong = result["strategies"][name]["wrong_share"]["mean"][-1]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {wrong:.2f} |")
    for method, agreement in result["rollout_agreement"].items():
        lines.append(f"\n{method} first error = known first error: {agreement['agree']:.1%} of held-out solutions, "
                     f"{agreement['agree_on_wrong']:.1%} of wrong ones")
    lines.append(f"{result['seconds']} s")
    return "\n".join(lines)
