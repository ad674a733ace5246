"""./stepwise bench simulate_judge [--problems N] [--heldout M] [--budgets B ...] [--seeds S ...]
    [--judge-miss P] [--judge-false-alarm P] [--labeler-miss P] [--labeler-false-alarm P]
    [--quick] [--output JSON] [--json]

A PRM trained on each label source (bench/simulation_judge.py): human labels (gold, and with
labeler noise), rollouts, a simulated judge of known error rates, rollouts and judge pooled, and
consensus-filtered (only the steps where rollouts and the judge agree), the same solutions for
every arm, in the learnable domain. Prints per budget and arm: labeled steps, label accuracy up
to the first error, held-out step AUC with a 95 % bootstrap interval over seeds, and consensus's
gain over each arm, paired by seed. --quick: a small run for tests.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from django.core.management.base import BaseCommand, CommandError

from bench import learnable_domain, simulation_judge
from bench.simulation import stderr_log
from bench.simulation_judge import ARMS, TITLES, Rates, Settings

QUICK = {"problems": 150, "heldout": 40, "budgets": [150], "seeds": [0, 1]}


class Command(BaseCommand):
    help = "Measure a PRM trained on human, rollout, judge, pooled and consensus-filtered labels."

    def add_arguments(self, parser):
        parser.add_argument("--problems", type=int, default=2500, help="pool problems (right + 2 wrong each)")
        parser.add_argument("--heldout", type=int, default=500, help="held-out problems (right + 3 wrong each)")
        parser.add_argument("--budgets", type=int, nargs="+", default=[500, 2000, 5000],
                            help="labeled solutions each arm trains on (the same ones for every arm)")
        parser.add_argument("--seeds", type=int, nargs="+", default=list(range(5)))
        defaults = Settings(budgets=[], seeds=[])
        for who, rates in (("judge", defaults.judge), ("labeler", defaults.labelers)):
            parser.add_argument(f"--{who}-miss", type=float, default=rates.miss,
                                help=f"P({who} calls the first error right)")
            parser.add_argument(f"--{who}-false-alarm", type=float, default=rates.false_alarm,
                                help=f"P({who} calls a right step wrong)")
        parser.add_argument("--quick", action="store_true", help="a small run: " + json.dumps(QUICK))
        parser.add_argument("--output", type=Path, default=None, help="write the JSON here (after every seed)")
        parser.add_argument("--json", action="store_true", help="print the full result as JSON")

    def handle(self, *args, **options):
        torch.set_num_threads(1)
        options |= QUICK if options["quick"] else {}
        settings = self.settings(options)
        pool = learnable_domain.make_problems(options["problems"], variants=2, seed=1)
        held = learnable_domain.make_problems(options["heldout"], variants=3, seed=2)
        n_pool = sum(len(p.solutions) for p in pool)
        if max(settings.budgets) > n_pool:
            raise CommandError(f"--budgets: {max(settings.budgets)} solutions asked, the pool has {n_pool}")
        started, per_seed = time.monotonic(), []
        for seed in settings.seeds:
            per_seed.append(simulation_judge.run_seed(pool, held, settings, seed=seed, log=stderr_log))
            result = {"settings": describe(settings, options, n_pool), "seconds": round(time.monotonic() - started, 1),
                      "budgets": simulation_judge.summarize(per_seed, settings)}
            if options["output"]:
                options["output"].write_text(json.dumps(result, indent=1))
        self.stdout.write(json.dumps(result, indent=2) if options["json"] else table(result))

    @staticmethod
    def settings(options: dict) -> Settings:
        if any(b < 2 for b in options["budgets"]) or not options["seeds"]:
            raise CommandError("--budgets: at least 2 solutions each; --seeds: at least one")
        try:
            judge = Rates(miss=options["judge_miss"], false_alarm=options["judge_false_alarm"])
            labelers = Rates(miss=options["labeler_miss"], false_alarm=options["labeler_false_alarm"])
        except ValueError as error:
            raise CommandError(str(error)) from error
        return Settings(budgets=sorted(options["budgets"]), seeds=options["seeds"], judge=judge, labelers=labelers)


def describe(settings: Settings, options: dict, n_pool: int) -> dict:
    return {"problems": options["problems"], "pool_solutions": n_pool, "heldout": options["heldout"],
            "budgets": settings.budgets, "seeds": settings.seeds, "judge": settings.judge.__dict__,
            "labelers": settings.labelers.__dict__, "rollouts": learnable_domain.ROLLOUTS,
            "solve_from_right": learnable_domain.SOLVE_FROM_RIGHT,
            "solve_from_wrong": learnable_domain.SOLVE_FROM_WRONG, "scorer": settings.scorer.__dict__}


def table(result: dict) -> str:
    seeds = len(result["settings"]["seeds"])
    lines = [f"step AUC on held-out steps, mean over {seeds} seeds [95 % bootstrap over seeds]:",
             "| solutions | labels | labeled steps (share of all) | accuracy to the first error | "
             "labels after it | labels' first error right | step AUC | first-error F1 | consensus − this arm |",
             "|---|---|---|---|---|---|---|---|---|"]
    for budget, arms in result["budgets"].items():
        for arm in ARMS:
            m = arms[arm]
            gain = arms["consensus"].get(f"gain_over_{arm}")
            lines.append(
                f"| {budget} | {TITLES[arm]} | {m['steps_per_solution']:.2f} a solution ({m['step_share']:.0%}) | "
                f"{m['accuracy']:.3f} | {m['beyond_first_error']:.0%} | {m['first_error_agreement']:.0%} | "
                f"{_interval(m['step_auc'])} | "
                f"{m['processbench_f1']:.3f} | {_interval(gain, signed=True) if gain else '–'} |")
    judge, labelers = result["settings"]["judge"], result["settings"]["labelers"]
    lines.append(f"\njudge: misses {judge['miss']:.0%} of first errors, flags {judge['false_alarm']:.0%} of right "
                 f"steps; labelers: {labelers['miss']:.0%}, {labelers['false_alarm']:.0%}; "
                 f"{result['seconds']} s")
    return "\n".join(lines)


def _interval(figure: dict, *, signed: bool = False) -> str:
    low, high = figure["interval_95"]
    form = "+.3f" if signed else ".3f"
    return f"{figure['mean']:{form}} [{low:{form}}, {high:{form}}]"
