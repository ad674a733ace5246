"""./stepwise bench simulate_assistance [--labels N ...] [--problems N] [--miss P] ... [--json]

The assisted-labeling benchmark (bench/simulation_assistance.py): a simulated annotator labels
gold items (generated arithmetic chains with a known first error, bench/learnable_domain.py)
under each assistance mode, blind / second_look / suggest, with the step scores of a real
scorer: the domain's MLP trained from scratch on --labels random labeled solutions (a model
that knows little, and more), plus two references: an uninformative model (p = 0.5 on every
step) and an oracle (p = 0.05 at the true first error, 0.95 elsewhere). Prints, per scorer and
mode, the share of the annotator's misses caught, false alarms per task and extra seconds per
task against blind.
"""
from __future__ import annotations

import json

import torch
from django.core.management.base import BaseCommand, CommandError

from bench import learnable_domain, simulation_assistance
from bench.simulation_assistance import Annotator, GoldTask


def gold_tasks(problems, ps_of) -> list[GoldTask]:
    return [GoldTask(s.first_error, ps_of(s, k)) for k, s in enumerate(s for p in problems for s in p.solutions)]


class Command(BaseCommand):
    help = "Measure what each assistance mode (blind, second look, suggest) catches and costs on gold items."

    def add_arguments(self, parser):
        defaults = Annotator()
        parser.add_argument("--problems", type=int, default=500, help="gold problems (each: right + 3 wrong)")
        parser.add_argument("--train-problems", type=int, default=2500, help="problems the scorer learns from")
        parser.add_argument("--labels", type=int, nargs="+", default=[300, 1000, 3000],
                            help="labeled solutions for each trained scorer")
        parser.add_argument("--margin", type=float, default=0.5, help="the project's assistance_margin")
        parser.add_argument("--seed", type=int, default=0)
        for name in ("miss", "false_alarm", "recover", "talked_out", "anchor", "seconds_per_step",
                     "seconds_per_look", "seconds_per_suggestion"):
            parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=getattr(defaults, name))
        parser.add_argument("--json", action="store_true", help="print the full result as JSON")

    def handle(self, *args, **options):
        torch.set_num_threads(1)
        try:
            person = Annotator(**{name: options[name] for name in Annotator.__dataclass_fields__})
        except ValueError as error:
            raise CommandError(str(error)) from error
        if not 0 <= options["margin"] <= 1:
            raise CommandError(f"--margin {options['margin']}: between 0 and 1")
        result = self.measure(options, person)
        self.stdout.write(json.dumps(result, indent=2) if options["json"] else table(result))

    def measure(self, options: dict, person: Annotator) -> dict:
        seed = options["seed"]
        gold = learnable_domain.make_problems(options["problems"], variants=3, seed=seed + 2)
        train = learnable_domain.make_problems(options["train_problems"], variants=2, seed=seed + 1)
        gold_data = learnable_domain.Solutions.of(gold)
        scorers = {"uninformative (p = 0.5)": gold_tasks(gold, lambda s, k: [0.5] * len(s.steps)),
                   "oracle": gold_tasks(gold, lambda s, k: [0.05 if i == s.first_error else 0.95
                                                            for i in range(len(s.steps))])}
        for labels in options["labels"]:
            model, _ = learnable_domain.train_scorer(train, labels=labels, seed=seed)
            ps = [p.tolist() for p in gold_data.split(learnable_domain.probabilities(model, gold_data))]
            scorers[f"MLP on {labels} labels"] = gold_tasks(gold, lambda s, k, ps=ps: ps[k])
        return {"annotator": person.__dict__, "margin": options["margin"], "seed": seed,
                "scorers": {name: simulation_assistance.measure(tasks, person, margin=options["margin"], seed=seed)
                            | {"model": simulation_assistance.model_quality(tasks)}
                            for name, tasks in scorers.items()}}


def table(result: dict) -> str:
    lines = ["| scorer (step AUC, guess accuracy) | mode | misses caught | false alarms / task | "
             "extra s / task | looks / task | first error right |", "|---|---|---|---|---|---|---|"]
    for name, measured in result["scorers"].items():
        quality = measured["model"]
        label = f"{name} ({quality['step_auc']:.3f}, {quality['guess_accuracy']:.3f})"
        for mode, m in measured["modes"].items():
            caught = "–" if m["misses_caught"] is None else f"{m['misses_caught']:.1%}"
            lines.append(f"| {label} | {mode} | {caught} | {m['false_alarms_per_task']:.3f} | "
                         f"{m['extra_seconds_per_task']:+.1f} | {m['looks_per_task']:.2f} | "
                         f"{m['first_error_accuracy']:.1%} |")
    first = next(iter(result["scorers"].values()))
    lines.append(f"\n{first['tasks']} gold tasks, {first['blind_misses']} first errors missed blind; "
                 f"annotator {result['annotator']}, margin {result['margin']}")
    return "\n".join(lines)
