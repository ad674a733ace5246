"""Demo accounts and a demo pool made by the project itself. Safe to run again."""
import json

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from annotate.labeling import queueing
from annotate.labeling.roles import ADMIN, ANNOTATOR, REVIEWER, grant_role
from annotate.models import QueueItem, Solution
from annotate.models.pool import DEMO_SOURCE
from annotate.pool import importing
from annotate.pool.synthetic import generic_lines, make_pool

DEMO_USERS = [
    # username, password, role
    ("admin", "stepwise-admin", ADMIN),
    ("annotator", "stepwise-demo", ANNOTATOR),
    ("reviewer", "stepwise-review", REVIEWER),
]


class Command(BaseCommand):
    help = "Create demo users and a demo pool of arithmetic word problems (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--problems", type=int, default=60)

    def handle(self, *args, problems: int, **options):
        for username, password, role in DEMO_USERS:
            self._ensure_user(username, password, role)
        path = settings.DATA_DIR / "demo-pool.jsonl"
        with open(path, "w") as out:
            for line in generic_lines(make_pool(n_problems=problems, seed=0), source=DEMO_SOURCE):
                out.write(json.dumps(line) + "\n")
        summary = importing.import_pool(path=path, format="generic", source=DEMO_SOURCE)
        queueing.ensure_default_queue()
        # Counted from the tables, not from the import summary: on a new database the file's own
        # repeated lines are "duplicates" too, which read as if the pool had been there already.
        pool = Solution.objects.filter(source=DEMO_SOURCE).count()
        available = QueueItem.objects.filter(status=QueueItem.Status.AVAILABLE, solution__source=DEMO_SOURCE)
        ready = available.values("solution").distinct().count()
        if summary.created:
            what = f"{summary.created} solutions to {problems} problems imported"
        else:
            what = f"already imported ({pool} solutions)"
        self.stdout.write(f"Demo pool: {what}; {ready} ready to label.")

    def _ensure_user(self, username: str, password: str, role: str) -> None:
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_password(password)
            user.save()
            grant_role(user, role)
