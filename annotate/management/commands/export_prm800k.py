"""Write a project's labels as a dataset file: PRM800K JSONL by default, or TRL, ProcessBench, soft
labels, OpenRLHF or verification chains, as JSONL, Parquet or a Hugging Face `datasets` folder; from
people, rollouts, a verifier model (judge), or the steps where chosen sources agree (consensus)."""
from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotate.management.projects import add_project_option, project_of
from annotate.models import FinishReason
from annotate.pool import exporting


class Command(BaseCommand):
    help = (f"Export a project's labels as PRM800K JSONL (or --format {'|'.join(exporting.FORMATS)}): people's by "
            "default, or --labels automatic|both|judge|consensus.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "out", help="Destination (written atomically): a .jsonl file, or for parquet / hf_dataset a folder "
                        "(a .zip name zips it)",
        )
        add_project_option(parser)
        parser.add_argument("--format", default="prm800k", choices=list(exporting.FORMATS),
                            help="; ".join(f"{name}: {f.help}" for name, f in exporting.FORMATS.items()))
        parser.add_argument("--generation", type=int, action="append", default=[], help="Repeatable")
        parser.add_argument("--since", help="Only labels made on or after this date / ISO datetime")
        parser.add_argument("--include-qc", action="store_true", help="Include quality-control questions")
        parser.add_argument(
            "--finish-reason", action="append", default=[], choices=sorted(FinishReason.values),
            help="Repeatable",
        )
        parser.add_argument(
            "--neutral", choices=("good", "bad"), default="good",
            help="How a 0 rating counts in TRL, soft, OpenRLHF and critique labels (bad: only +1 is good, as in "
                 "TRL's PRM800K converter)",
        )
        parser.add_argument(
            "--container", choices=exporting.CONTAINERS, default="jsonl",
            help="jsonl (default); parquet: README.md card + data/train.parquet; hf_dataset: save_to_disk + card",
        )
        parser.add_argument(
            "--labels", choices=exporting.LABEL_SOURCES, default="human",
            help="human: annotators' labels (default); automatic: rollouts and imports; both: human rows, then "
                 "automatic ones (prm800k: adds auto_labels per step); judge: a verifier model's verdicts alone; "
                 "consensus: only the steps the --consensus sources agree on",
        )
        parser.add_argument(
            "--consensus", default=",".join(exporting.DEFAULT_CONSENSUS), metavar="SOURCES",
            help=f"With --labels consensus: two or more of {', '.join(exporting.CONSENSUS_SOURCES)}, comma-separated "
                 f"(default {','.join(exporting.DEFAULT_CONSENSUS)}, as Qwen's PRM study)",
        )

    def handle(self, *args, **opts) -> None:
        project = project_of(opts)
        try:
            options = exporting.ExportOptions.from_dict({
                "generations": opts["generation"],
                "since": opts["since"],
                "include_qc": opts["include_qc"],
                "finish_reasons": opts["finish_reason"],
                "neutral_is_good": opts["neutral"] == "good",
                "container": opts["container"],
                "labels": opts["labels"],
                "consensus": opts["consensus"],
            })
            lines = exporting.write_export(project=project, path=opts["out"], format=opts["format"], options=options)
        except exporting.ExportError as error:
            raise CommandError(str(error)) from None
        unit = "lines" if opts["container"] == "jsonl" else f"rows ({opts['container']})"
        self.stdout.write(f"wrote {lines} {opts['format']} {unit} of project {project.slug} to {opts['out']}")
