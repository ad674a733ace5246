"""./stepwise manage add_user NAME --role annotator|reviewer|admin [--email E]

There is no sign-up page: admins create accounts, here or in the Django admin. Prints a
generated password once (or reads it from STEPWISE_NEW_PASSWORD), so none is typed into
the shell history.
"""
import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from annotate.labeling import roles


class Command(BaseCommand):
    help = "Create a user with a role (annotator, reviewer or admin)"

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=roles.ROLES)
        parser.add_argument("--email", default="")

    def handle(self, *args, username: str, role: str, email: str, **options):
        User = get_user_model()
        if User.objects.filter(username=username).exists():
            raise CommandError(f"user {username!r} already exists")
        password = os.environ.get("STEPWISE_NEW_PASSWORD") or secrets.token_urlsafe(12)
        with transaction.atomic():
            user = User.objects.create_user(username, email=email, password=password)
            roles.grant_role(user, role)  # an admin becomes a superuser there, for the Django admin
        self.stdout.write(f"created {role} {username!r}")
        if "STEPWISE_NEW_PASSWORD" not in os.environ:
            self.stdout.write(f"password: {password}")
