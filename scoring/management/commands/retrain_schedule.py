"""`manage.py retrain_schedule [--project SLUG] [--every-minutes 30] [--min-new-labels 50]`: create a
project's periodic retrain task (one per project: each retrains on its own labels).

Idempotent: an existing task (perhaps edited in the admin) is left as it is and shown.
"""
import json

from django.core.management.base import BaseCommand

from scoring.learning import retraining
from scoring.management.projects import add_project_argument, project_option


class Command(BaseCommand):
    help = "Create (once) the django-celery-beat task that retrains when enough new labels exist."

    def add_arguments(self, parser):
        add_project_argument(parser)
        parser.add_argument("--every-minutes", type=int, default=30)
        parser.add_argument("--min-new-labels", type=int, default=50)

    def handle(self, *args, **options):
        project = project_option(options)
        task = retraining.ensure_schedule(
            project=project, every_minutes=options["every_minutes"], min_new_labels=options["min_new_labels"]
        )
        # The schedule's own text already starts with "every" ("every 30 minutes"); an admin
        # may have switched the task to a crontab.
        when = task.interval or task.crontab or task.clocked or task.solar
        min_new = json.loads(task.kwargs or "{}").get("min_new_labels")
        condition = f" once {min_new} new labels exist" if min_new is not None else ""
        state = "" if task.enabled else " (disabled in the admin)"
        self.stdout.write(f"Retraining {project.slug}: checked {when}, runs{condition}{state}.")
