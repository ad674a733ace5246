"""`manage.py train_prm [--project SLUG] [--wait | --inline] [--head point|beta] [--mode head|topk|lora|full]
[--labels ...] ...`

Starts a training run on every submitted label of the project (--labels: human, automatic, both, judge or consensus).
By default the run is queued for a worker on the `ml` queue; --wait then follows it until
it finishes, --inline runs it in this process (no worker needed). Exit status 1 when the run failed.
"""
import json
import time

from django.core.management.base import BaseCommand, CommandError

from jobs.states import JobState
from scoring.core import evaluation
from scoring.core.training_data import BIAS_CORRECTIONS, HEAD_TYPES, LABEL_SOURCES, MODES, NEUTRAL_MODES
from scoring.learning import promotion, retraining
from scoring.learning.options import DEFAULT_GATE_METRIC
from scoring.management.projects import add_project_argument, project_option
from scoring.models import TrainingRun


class Command(BaseCommand):
    help = "Train a new PRM version on the collected labels, evaluate it and promote it if it is not worse."

    def add_arguments(self, parser):
        add_project_argument(parser)
        parser.add_argument("--wait", action="store_true", help="follow the queued run until it finishes")
        parser.add_argument("--inline", action="store_true", help="run here instead of on a worker")
        parser.add_argument("--head", choices=HEAD_TYPES, default="point")
        parser.add_argument("--mode", choices=MODES, default="head")
        parser.add_argument("--labels", choices=LABEL_SOURCES, default="human",
                            help="train on human labels, automatic (rollout/imported) labels, or both; judge: a "
                                 "verifier's verdicts, one vote a step; consensus: the steps where rollouts and "
                                 "the judge agree")
        parser.add_argument("--epochs", type=int)
        parser.add_argument("--layer", type=int, help="hidden-state index the head reads (default: the parent's)")
        parser.add_argument("--neutral", choices=NEUTRAL_MODES, help="how a neutral (0) rating counts")
        parser.add_argument("--bias-correction", choices=BIAS_CORRECTIONS)
        parser.add_argument("--target-base-rate", type=float)
        parser.add_argument("--seed", type=int)
        parser.add_argument(
            "--gate-metric", choices=list(evaluation.GATE_METRICS), default=DEFAULT_GATE_METRIC
        )
        parser.add_argument(
            "--tolerance", type=float, default=0.0, help="allowed drop of the gate metric (negative: required gain)"
        )
        parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                            help="any other training option, e.g. --set lr=0.01 --set lora_r=16 (JSON values)")

    def handle(self, *args, **options):
        if options["wait"] and options["inline"]:
            raise CommandError("--wait and --inline exclude each other")
        project = project_option(options)
        train = {"head": options["head"], "mode": options["mode"], "labels": options["labels"]}
        for key in ("epochs", "layer", "neutral", "bias_correction", "target_base_rate", "seed"):
            if options[key] is not None:
                train[key] = options[key]
        for item in options["set"]:
            key, sep, value = item.partition("=")
            if not sep:
                raise CommandError(f"--set {item!r}: expected KEY=VALUE")
            try:
                train[key.strip()] = json.loads(value)
            except json.JSONDecodeError:
                train[key.strip()] = value
        run_options = {"train": train, "gate_metric": options["gate_metric"], "tolerance": options["tolerance"]}
        try:
            run = retraining.start_training_run(project=project, options=run_options, enqueue=not options["inline"])
        except (ValueError, retraining.TrainingAlreadyActive) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"training run {run.pk} of {project.slug} "
                          f"{'started here' if options['inline'] else 'queued on ml'}")
        if options["inline"]:
            try:
                run = retraining.run_training(run_id=run.pk)
            except Exception:
                run.refresh_from_db()
        elif options["wait"]:
            run = self.follow(run)
        else:
            return
        self.report(run)

    def follow(self, run: TrainingRun) -> TrainingRun:
        seen = 0
        while True:
            run.refresh_from_db()
            if len(run.log) > seen:
                self.stdout.write(run.log[seen:].rstrip("\n"))
                seen = len(run.log)
            if run.is_finished:
                return run
            time.sleep(1)

    def report(self, run: TrainingRun) -> None:
        if run.state == JobState.FAILED:
            raise CommandError(f"training run {run.pk} failed: {run.error}")
        self.stdout.write(f"run {run.pk} {run.state}: {run.result.name if run.result else '-'}; "
                          f"gate {run.gate.get('metric')} {promotion.describe(run.gate)}")
