"""`manage.py init_default_model`: build generation 0 (SmolLM2 + untrained head) offline, once."""
from django.core.management.base import BaseCommand, CommandError

from scoring import default_model


class Command(BaseCommand):
    help = "Convert the bundled SmolLM2-135M-Instruct GGUF to safetensors and register it (idempotent)."

    def handle(self, *args, **options):
        try:
            version = default_model.ensure_default_model()
        except FileNotFoundError as error:
            raise CommandError(str(error)) from None
        current = " (current)" if version.is_current else ""
        self.stdout.write(self.style.SUCCESS(f"Default model {version.name}{current} at {version.path}"))
