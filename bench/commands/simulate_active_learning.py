"""./stepwise bench simulate_active_learning --json [--rounds R] [--batch B] [--seeds S ...]
    [--pool gsm8k|synthetic] [--problems N] [--heldout M] [--data DIR] [--plot SVG]

The active-learning benchmark (bench/simulation.py): per selection strategy, held-out
quality versus number of labeled solutions, with spread over seeds, and the data-efficiency
ratio against random selection. Runs in a scratch database, so the real pool is untouched.
Progress goes to stderr; the result (JSON with --json) to stdout.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from bench.data import DATA

DEFAULT_DATA = DATA


class Command(BaseCommand):
    help = "Measure what each active-learning selection strategy buys, with simulated annotators."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print the full result as JSON")
        parser.add_argument("--rounds", type=int, default=5, help="selection rounds after the first pick")
        parser.add_argument("--batch", type=int, default=20, help="solutions labeled per round (B)")
        parser.add_argument("--initial", type=int, default=20, help="random first pick, shared by all strategies")
        parser.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
        parser.add_argument(
            "--strategies", nargs="+", default=None, help="subset of random convincing_wrong uncertainty mix"
        )
        parser.add_argument("--pool", default="gsm8k", help="gsm8k (real problems, needs --data) or synthetic")
        parser.add_argument("--problems", type=int, default=150, help="pool problems")
        parser.add_argument("--heldout", type=int, default=40, help="held-out problems for evaluation")
        parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with gsm8k/{train,test}.jsonl")
        parser.add_argument("--backbone", type=Path, default=None,
                            help="transformers folder (default: the SmolLM2-135M default model's backbone)")
        parser.add_argument(
            "--layer", type=int, default=None, help="hidden state read by the head (default ~60%% depth)"
        )
        parser.add_argument("--epochs", type=int, default=30, help="head training epochs (production default 30)")
        parser.add_argument("--lr", type=float, default=1e-3, help="head learning rate (production default 1e-3)")
        parser.add_argument("--cache-dir", type=Path, default=None,
                            help="feature cache (default: the product's, settings.FEATURE_CACHE_DIR)")
        parser.add_argument("--plot", type=Path, default=None, help="SVG of the curves (default: data dir)")
        parser.add_argument("--output", type=Path, default=None, help="also write the JSON here")
        parser.add_argument("--scale", action="store_true",
                            help="the pool-scale benchmark (bench/simulation_scale.py): in memory on cached "
                                 "features, converged L2 head, ensemble strategies; uses --budgets")
        parser.add_argument("--budgets", type=int, nargs="+", default=[50, 100, 200, 400, 700, 1000, 1500, 2000],
                            help="--scale: labeled solutions after each round (the first is the random pick)")
        parser.add_argument("--members", type=int, default=8, help="--scale: bootstrap ensemble size")
        parser.add_argument("--bias-correction", default="importance", choices=["importance", "none"],
                            help="--scale: importance weights on the labels (as retraining) or none")
        parser.add_argument("--rank", type=int, default=128,
                            help="--scale: principal directions of the pool's features the head may use")
        parser.add_argument("--threads", type=int, default=1,
                            help="--scale: torch threads for the small solves (1 is fastest on a loaded CPU)")
        parser.add_argument("--merge", type=Path, nargs="+", default=None,
                            help="--scale results (JSON) over disjoint seeds -> one result (--output, --plot)")

    def handle(self, *args, **options):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        from bench import simulation, simulation_pool, simulation_report

        if options["merge"]:
            return self.handle_merge(options)
        # One setup for both loops: settings and pool checked before the backbone loads.
        try:
            sim = loop_settings(options)
            pool, held_out = simulation_pool.make_problems(pool=options["pool"], data=options["data"],
                                                      n_pool=options["problems"], n_heldout=options["heldout"])
        except ValueError as error:
            raise CommandError(str(error)) from None
        backbone = simulation.load_backbone(options["backbone"] or default_backbone(),
                                            cache_dir=options["cache_dir"] or settings.FEATURE_CACHE_DIR,
                                            layer=options["layer"])
        described = {"pool": options["pool"], "problems": options["problems"], "heldout": options["heldout"],
                     "layer": backbone.layer, "backbone": str(options["backbone"] or default_backbone())}
        try:
            run = run_scale if options["scale"] else run_database_loop
            result = run(backbone, pool, held_out, sim, options, described=described)
        except ValueError as error:
            raise CommandError(str(error)) from None
        result["settings"] |= described
        default_plot = "active-learning-scale.svg" if options["scale"] else "active-learning.svg"
        result["plot"] = str(simulation_report.plot(result, options["plot"] or settings.DATA_DIR / default_plot))
        text = write_output(result, options)
        self.stdout.write(text if options["json"] else summary_table(result))

    def handle_merge(self, options):
        from bench import simulation_report, simulation_scale

        try:
            result = simulation_scale.merge([json.loads(path.read_text()) for path in options["merge"]])
        except (OSError, ValueError) as error:
            raise CommandError(str(error)) from None
        result["plot"] = str(simulation_report.plot(result, options["plot"] or settings.DATA_DIR
                                                    / "active-learning-scale.svg"))
        text = write_output(result, options)
        self.stdout.write(text if options["json"] else summary_table(result))


def loop_settings(options):
    """The database loop's Settings, or with --scale the pool-scale loop's, checked."""
    from bench import simulation, simulation_scale

    if options["scale"]:
        sim = simulation_scale.ScaleSettings(
            budgets=tuple(options["budgets"]), seeds=tuple(options["seeds"]),
            strategies=tuple(options["strategies"] or simulation_scale.STRATEGIES), members=options["members"],
            bias_correction=options["bias_correction"], rank=options["rank"])
        sim.validate(10**9)  # the budget against the pool size is checked once the pool is built
        return sim
    sim = simulation.Settings(rounds=options["rounds"], batch=options["batch"], initial=options["initial"],
                              seeds=tuple(options["seeds"]), epochs=options["epochs"], lr=options["lr"],
                              strategies=tuple(options["strategies"] or simulation.STRATEGIES))
    sim.validate()
    return sim


def run_database_loop(backbone, pool, held_out, sim, options, *, described: dict) -> dict:
    from bench import simulation

    with simulation.scratch_database():
        return simulation.simulate(backbone=backbone, pool=pool, held_out=held_out, sim=sim,
                                   source=options["pool"], log=simulation.stderr_log)


def run_scale(backbone, pool, held_out, sim, options, *, described: dict) -> dict:
    from bench import simulation, simulation_scale

    def on_seed(partial: dict) -> None:  # a result as complete as the final one, over fewer seeds
        partial["settings"] |= described
        write_output(partial, options)

    result = simulation_scale.simulate_scale(
        pool_problems=pool, held_problems=held_out, features=featurizer(backbone, small_threads=options["threads"]),
        sim=sim, log=simulation.stderr_log, on_seed=on_seed)
    result["timing"]["featurized_tokens"] = backbone.cache.computed_tokens
    return result


def featurizer(backbone, *, small_threads: int):
    """Features through the shared FeatureCache, with progress; the backbone forward gets every
    core, the loop's small solves afterwards `small_threads` (one is fastest on a loaded CPU)."""
    import time

    import torch

    from bench import simulation

    threads = torch.get_num_threads()

    def features(items):
        out, started = [], time.perf_counter()
        torch.set_num_threads(threads)
        for start in range(0, len(items), 256):
            out += backbone.cache.features(backbone.loaded, items[start:start + 256], layer=backbone.layer,
                                           backbone_id=backbone.backbone_id)
            simulation.stderr_log(f"features {min(start + 256, len(items))}/{len(items)} "
                                  f"({backbone.cache.computed_tokens} tokens computed, "
                                  f"{time.perf_counter() - started:.0f} s)")
        torch.set_num_threads(small_threads)
        return out

    return features


def write_output(result: dict, options) -> str:
    text = json.dumps(result, indent=2)
    if options["output"]:
        options["output"].write_text(text + "\n")
    return text


def default_backbone() -> Path:
    from scoring.store import default_model

    return default_model.convert_gguf(default_model.gguf_path(), settings.MODELS_DIR / default_model.BACKBONE_NAME)


def summary_table(result: dict) -> str:
    lines = [f"{'strategy':18} {'paired AUC':>12} {'step AUC':>10} {'solution AUC':>13} {'efficiency (paired)':>20}"]
    for name, summary in result["strategies"].items():
        ratio = result["efficiency_ratio"].get(name, {}).get("paired_auc", {})
        last = {m: summary[m]["mean"][-1] for m in ("paired_auc", "step_auc", "solution_auc")}
        lines.append(f"{name:18} {_f(last['paired_auc']):>12} {_f(last['step_auc']):>10} "
                     f"{_f(last['solution_auc']):>13} "
                     f"{'<=' if ratio.get('unreached') else '':>3}{_f(ratio.get('ratio')):>9} ± {_f(ratio.get('std'))}")
    lines.append("<= : some quality levels were never reached, so the ratio is an upper bound")
    lines.append(f"plot: {result['plot']}")
    return "\n".join(lines)


def _f(value) -> str:
    return "-" if value is None else f"{value:.3f}"
