"""`manage.py eval_prm [--project SLUG] [--model VERSION] [--json] [--save]`: evaluate a model on a
project's held-out labels.

The held-out set is the one the project's training uses: labeled solutions of validation
problems (split by problem), plus graded solutions of held-out problems for best-of-N.
"""
import json

from django.core.management.base import BaseCommand

from scoring.learning import promotion
from scoring.management.projects import add_project_argument, project_option
from scoring.store import registry


class Command(BaseCommand):
    help = "Step AUC, paired AUC, ProcessBench F1, best-of-N and calibration of a model version."

    def add_arguments(self, parser):
        add_project_argument(parser)
        parser.add_argument("--model", help="version name (default: the project's current one)")
        parser.add_argument("--json", action="store_true", help="print the metrics as JSON")
        parser.add_argument("--save", action="store_true", help="store them on the version (metrics.eval)")
        parser.add_argument("--val-fraction", type=float, default=0.2)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--threshold", type=float, default=0.5, help="ProcessBench first-error threshold")

    def handle(self, *args, **options):
        project = project_option(options)
        version = registry.version_for_command(options["model"], project=project)
        metrics = promotion.evaluate_version(version=version, project=project, val_fraction=options["val_fraction"],
                                              seed=options["seed"], threshold=options["threshold"])
        if options["save"]:
            version.metrics = version.metrics | {"eval": metrics}
            version.save(update_fields=["metrics"])
        if options["json"]:
            self.stdout.write(json.dumps({"model": version.name, **metrics}, indent=2))
            return
        pb = metrics["processbench"]
        self.stdout.write(
            f"{version.name}: {metrics['n_solutions']} held-out solutions, {metrics['n_steps']} labeled steps"
        )
        for label, value in (("step AUC", metrics["step_auc"]), ("paired AUC", metrics["paired_auc"]),
                             ("ProcessBench F1", pb["f1"]), ("ECE", metrics["calibration"]["ece"])):
            self.stdout.write(f"  {label:16} {'-' if value is None else f'{value:.4f}'}")
