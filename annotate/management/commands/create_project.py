"""./stepwise manage create_project SLUG --name NAME [--description TEXT] [--guideline TEXT]

A new labeling project with its settings, which start from the environment's defaults
(STEPWISE_QUEUE_SIZE, STEPWISE_SELECTION_SHARES ...); its admins change them on its settings page.
"""
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from annotate.models import LabelingConfig, Project


class Command(BaseCommand):
    help = "Create a project (its slug names it in URLs and in the commands' --project) and its settings."

    def add_arguments(self, parser):
        parser.add_argument("slug", help="Lowercase letters, digits and hyphens, e.g. gsm8k-pilot")
        parser.add_argument("--name", required=True, help="The name people see")
        parser.add_argument("--description", default="")
        parser.add_argument("--guideline", default="", help="What annotators are asked to do (version 1)")

    def handle(self, *args, slug: str, name: str, description: str, guideline: str, **options):
        project = Project(slug=slug, name=name, description=description, guideline=guideline)
        try:
            project.full_clean()
        except ValidationError as error:
            raise CommandError("; ".join(f"{field}: {' '.join(messages)}"
                                         for field, messages in error.message_dict.items())) from None
        with transaction.atomic():
            project.save()
            LabelingConfig.of(project)  # its settings row, with the environment's defaults
        self.stdout.write(f"created project {slug!r} ({name}); add people with "
                          f"`add_user NAME --role annotator --project {slug}`")
