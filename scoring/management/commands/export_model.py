"""`manage.py export_model VERSION OUT [--as token_classification|step_token]`: a version as a
standard transformers checkpoint (see scoring.store.checkpoint_export)."""
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

    def handle(self, *args, version, out, as_kind, **options):
        model = registry.version_for_command(version, option="VERSION")
        try:
            exported = model_exports.export_version(version=model, out=out, as_kind=as_kind)
        except (registry.ModelIntegrityError, ModelFormatError, FileExistsError) as error:
            raise CommandError(str(error)) from None
        ids = {k: v for k, v in exported.config.items() if k.endswith("_id") or k == "positive_label"}
        self.stdout.write(f"Exported {model.name} as {as_kind} ({exported.construction}) to {exported.folder}: {ids}")
