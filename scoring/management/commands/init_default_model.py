"""`manage.py init_default_model [--rescore]`: build generation 0 (SmolLM2 + untrained head) offline, once."""
from django.core.management.base import BaseCommand, CommandError

from scoring.rescoring import rescore as scoring
from scoring.store import default_model
from scoring.store.registry import current_model_version


class Command(BaseCommand):
    help = "Convert the bundled SmolLM2-135M-Instruct GGUF to safetensors and register it (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--rescore", action="store_true",
                            help="then queue an (incremental) rescore of the pool with the current model")

    def handle(self, *args, rescore=False, **options):
        try:
            version = default_model.ensure_default_model()
        except FileNotFoundError as error:
            raise CommandError(str(error)) from None
        current = " (current)" if version.is_current else ""
        line = f"Default model: {version.name}{current} at {version.path}"
        if rescore:
            model = current_model_version() or version
            job = scoring.start_rescore(model_version=model)
            # One line: the job only scores what this model has not scored yet.
            line += f"; rescore job {job.pk} with {model.name} queued for the ml worker"
        self.stdout.write(line + ".")
