"""`manage.py eval_search [--dataset gsm8k|math500] [--problems N] [--model NAME | --prm FOLDER] ...`

Accuracy against generated tokens for best-of-N, majority vote, ACA, beam search and MCTS
on problems with known answers (`scoring.search.evaluation`). Writes the JSON report and a PNG
to --out (default DATA_DIR/reports/search-eval.{json,svg}); the models page shows the
report at the default place. The problems are read with the importer's own parsers.
"""
import json
import time
from pathlib import Path
from typing import cast

import torch
from django.core.management.base import BaseCommand, CommandError

from annotate.pool import importing
from scoring import search
from scoring.core import prm
from scoring.generation.generators import DEFAULT_PROMPT_TEMPLATE, LocalGenerator
from scoring.management.projects import add_project_argument, project_option
from scoring.search import evaluation as search_eval
from scoring.store import registry
from scoring.web import search_report

DATASETS = {"gsm8k": ("gsm8k/test.jsonl", importing.FORMATS["gsm8k"].parse),
            "math500": ("math500/test.jsonl", importing.FORMATS["math"].parse)}
# SmolLM2's chat format: an instruct model answers a user turn far better than raw text.
CHAT_TEMPLATE = "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def beams(text: str) -> tuple[tuple[int, int], ...]:
    """"2x2,4x2" -> ((2, 2), (4, 2)): beam width x expansions per beam."""
    return tuple(
        cast("tuple[int, int]", tuple(int(n) for n in item.split("x")))  # WIDTHxEXPANSIONS: two numbers
        for item in text.split(",") if item.strip()
    )


def load_problems(dataset: str, data: Path, *, n: int, shortest: bool) -> list[search_eval.EvalProblem]:
    """The first `n` problems of the test file (or the `n` with the shortest reference solutions)."""
    name, parse = DATASETS[dataset]
    path = data / name
    if not path.exists():
        raise CommandError(f"--data: {path} does not exist")
    records = [parse(json.loads(line), i) for i, line in enumerate(path.read_text().splitlines(), 1) if line.strip()]
    if shortest:
        records.sort(key=lambda r: len(r.ground_truth_solution or ""))
    return [search_eval.EvalProblem(r.statement, r.ground_truth_answer) for r in records[:n]]


class Command(BaseCommand):
    help = "Search curves: accuracy against generated tokens for best-of-N, ACA, beam search and MCTS."

    def add_arguments(self, parser):
        parser.add_argument("--dataset", choices=DATASETS, default="gsm8k")
        parser.add_argument("--data", type=Path, required=True,
                            help="folder with gsm8k/test.jsonl and math500/test.jsonl (a checkout's tests/data)")
        parser.add_argument("--problems", type=int, default=10)
        parser.add_argument("--shortest", action="store_true", help="the problems with the shortest references")
        add_project_argument(parser)
        parser.add_argument("--model", help="PRM version name (default: the project's current one)")
        parser.add_argument("--prm", type=Path, help="a PRM model folder instead of a registered version")
        parser.add_argument("--generator", type=Path, help="a causal-LM folder (default: the PRM's backbone)")
        parser.add_argument("--chat", action="store_true", help="wrap the prompt in SmolLM2's chat format")
        parser.add_argument("--ns", type=ints, default=(1, 2, 4, 8))
        parser.add_argument("--aggregation", default="min", choices=("product", "min", "last", "mean"))
        parser.add_argument("--max-solution-tokens", type=int, default=256)
        parser.add_argument("--aca", type=ints, default=(4, 4, 16), help="n0,m,n_total")
        parser.add_argument("--aca-lams", type=floats, default=(0.5, 1.0, 2.0))
        parser.add_argument("--beams", type=beams, default=((2, 2), (4, 2)), help="WIDTHxEXPANSIONS,...")
        parser.add_argument("--beam-tokens", type=int, default=1024, help="token budget per problem")
        parser.add_argument("--mcts", type=ints, default=(4, 8), help="simulations,...")
        parser.add_argument("--mcts-width", type=int, default=2)
        parser.add_argument("--mcts-tokens", type=int, default=1024, help="token budget per problem")
        parser.add_argument("--max-step-tokens", type=int, default=96)
        parser.add_argument("--max-steps", type=int, default=8)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--threads", type=int, help="torch CPU threads (1 is fastest on a busy machine)")
        parser.add_argument("--out", type=Path, help="report path (.json; the plot, .svg, goes beside it)")

    def handle(self, *args, **options):
        if options["threads"]:
            torch.set_num_threads(options["threads"])
        problems = load_problems(options["dataset"], options["data"], n=options["problems"],
                                 shortest=options["shortest"])
        prm, model_name, backbone = self._prm(options)
        generator = self._generator(options["generator"] or backbone)
        n0, m, n_total = options["aca"]
        template = CHAT_TEMPLATE.replace("{prompt}", DEFAULT_PROMPT_TEMPLATE) if options["chat"] else \
            DEFAULT_PROMPT_TEMPLATE
        config = search_eval.EvalConfig(
            ns=options["ns"], aggregation=options["aggregation"], max_solution_tokens=options["max_solution_tokens"],
            aca_n0=n0, aca_m=m, aca_n_total=n_total, aca_lams=options["aca_lams"], beams=options["beams"],
            beam_tokens=options["beam_tokens"], mcts_simulations=options["mcts"], mcts_width=options["mcts_width"],
            mcts_tokens=options["mcts_tokens"],
            steps=search.StepOptions(template=template, max_step_tokens=options["max_step_tokens"],
                                     max_steps=options["max_steps"], seed=options["seed"]),
        )
        extra = {"dataset": options["dataset"], "model": model_name, "chat": options["chat"]}

        def save(report: dict) -> Path:
            report |= extra | {"created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
            out = search_report.write(report, options["out"])
            search_eval.plot(report, out.with_suffix(".svg"))
            return out

        report = search_eval.evaluate(problems, generator=generator, scorer=search.prm_scorer(prm), config=config,
                                      log=lambda line: self.stderr.write(line), checkpoint=save)
        out = save(report)
        self._summary(report, out)

    def _prm(self, options):
        if options["prm"]:
            folder = options["prm"].resolve()
            loaded = prm.load_prm(folder, dtype=registry._dtype_setting())
            return loaded, folder.name, prm.backbone_folder(folder, prm.read_model_config(folder))
        version = registry.version_for_command(options["model"], project=project_option(options))
        return registry.load(version), version.name, prm.backbone_folder(version.path, version.config)

    def _generator(self, folder):
        return LocalGenerator(folder, dtype=registry._dtype_setting())

    def _summary(self, report: dict, out: Path) -> None:
        self.stdout.write(f"{report['problems']} {report['dataset']} problems in {report['seconds']} s; "
                          f"report {out}, plot {out.with_suffix('.svg')}")
        for series, points in report["curves"].items():
            cells = ", ".join(f"{p['label']}: {p['accuracy']:.2f} @ {p['tokens']:.0f}" for p in points)
            self.stdout.write(f"  {series:24} {cells}")
        for row in report["aca_savings"]:
            equal, fixed = row["saved_at_equal_accuracy"], row["saved_vs_fixed_n_total"]
            self.stdout.write(f"  ACA {row['label']}: {row['tokens']:.0f} tokens, accuracy {row['accuracy']:.2f}; "
                              f"saved at equal accuracy {_percent(equal)}, "
                              f"vs fixed N={report['settings']['aca_n_total']} {_percent(fixed)}")


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{share:.1%}"
