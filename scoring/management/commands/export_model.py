"""`manage.py export_model VERSION OUT [--as token_classification|step_token] [--serve-as vllm]`: a
version as a standard transformers checkpoint, or in the form vLLM's pooling runner serves (see
scoring.store.checkpoint_export)."""
from django.core.management.base import BaseCommand, CommandError

from scoring.core.model_files import EXPORT_KINDS, ModelFormatError
from scoring.store import model_exports, registry


class Command(BaseCommand):
    help = "Write a model version as a transformers folder that loads with no custom code, with a model card."

    def add_arguments(self, parser):
        parser.add_argument("version", help="model version name")
        parser.add_argument("out", help="new folder to write (must not exist)")
        parser.add_argument("--as", dest="as_kind", choices=EXPORT_KINDS, default="token_classification",
                            help="AutoModelForTokenClassification (default) or AutoModelForCausalLM at a step tag")
        parser.add_argument("--serve-as", dest="serve_as", choices=("transformers", "vllm"), default="transformers",
                            help="vllm: Qwen2ForProcessRewardModel, served by `vllm serve --runner pooling` "
                                 "(token_classification only; the card gives the line)")

    def handle(self, *args, version, out, as_kind, serve_as, **options):
        model = registry.version_for_command(version, option="VERSION")
        try:
            exported = model_exports.export_version(version=model, out=out, as_kind=as_kind, serve_as=serve_as)
        except (registry.ModelIntegrityError, ModelFormatError, FileExistsError) as error:
            raise CommandError(str(error)) from None
        ids = {k: v for k, v in exported.config.items() if k.endswith("_id") or k == "positive_label"}
        self.stdout.write(f"Exported {model.name} as {as_kind} for {serve_as} ({exported.construction}) "
                          f"to {exported.folder}: {ids}")
