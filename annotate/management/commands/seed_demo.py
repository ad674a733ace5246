"""Demo accounts and two demo projects (GSM8K and MATH, different rules) with their pools, from
files in the repository (annotate/pool/demo.py). Safe to run again."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from annotate.models import Membership
from annotate.pool import demo

DEMO_USERS = [
    # username, password, role (admin: a site admin; the others are members of every demo project)
    ("admin", "stepwise-admin", Membership.Role.ADMIN),
    ("annotator", "stepwise-demo", Membership.Role.ANNOTATOR),
    ("reviewer", "stepwise-review", Membership.Role.REVIEWER),
]


class Command(BaseCommand):
    help = "Create demo users and two demo projects, GSM8K and MATH, with small pools (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--problems", type=int, default=None,
                            help="Only each demo pool's first N problems (default: all of them)")

    def handle(self, *args, problems: int | None, **options):
        members: dict[str, str] = {}
        for username, password, role in DEMO_USERS:
            self._ensure_user(username, password, role)
            if role != Membership.Role.ADMIN:
                members[username] = role
        for seeded in demo.seed(problems=problems, members=members):
            if seeded.created:
                what = f"{seeded.created} solutions imported"
            else:
                what = f"already imported ({seeded.pool} solutions)"
            self.stdout.write(f"Demo project {seeded.project.slug} ({seeded.project.name}): {what}; "
                              f"{seeded.ready} ready to label.")

    def _ensure_user(self, username: str, password: str, role: str) -> None:
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_password(password)
            if role == Membership.Role.ADMIN:  # a site admin: every project, and the Django admin
                user.is_staff = user.is_superuser = True
            user.save()
