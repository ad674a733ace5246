"""`manage.py retrain_schedule [--every-minutes 30] [--min-new-labels 50]`: create the periodic retrain task.

Idempotent: an existing task (perhaps edited in the admin) is left as it is and shown.
"""
from django.core.management.base import BaseCommand

from scoring import retraining


class Command(BaseCommand):
    help = "Create (once) the django-celery-beat task that retrains when enough new labels exist."

    def add_arguments(self, parser):
        parser.add_argument("--every-minutes", type=int, default=30)
        parser.add_argument("--min-new-labels", type=int, default=50)

    def handle(self, *args, **options):
        task = retraining.ensure_schedule(
            every_minutes=options["every_minutes"], min_new_labels=options["min_new_labels"]
        )
        self.stdout.write(f"{task.name}: every {task.interval}, kwargs {task.kwargs}, enabled={task.enabled}")
