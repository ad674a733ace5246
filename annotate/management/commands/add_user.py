"""./stepwise manage add_user NAME --role annotator|reviewer|admin [--project SLUG] [--email E]

There is no sign-up page: admins create accounts, here or in the Django admin. A user holds a role
in each project they belong to: with a project (named, or the sole one), the user is made, or an
existing user is added to it, in that role (an existing member's role is changed). `--role admin`
without `--project` makes a site admin, as it always has: every role in every project, the Django
admin and the power to create projects. Prints a generated password once for a new user (or reads
it from STEPWISE_NEW_PASSWORD), so none is typed into the shell history.
"""
import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from annotate.labeling import members, roles
from annotate.management.projects import add_project_option, project_of
from annotate.models import Membership


class Command(BaseCommand):
    help = ("Create a user, or add an existing one to a project, with a role there (annotator, reviewer or "
            "admin); --role admin without --project makes a site admin")

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=Membership.Role.values)
        add_project_option(parser)
        parser.add_argument("--email", default="")

    def handle(self, *args, username: str, role: str, email: str, **options):
        User = get_user_model()
        site_admin = role == Membership.Role.ADMIN and options["project"] is None
        project = None if site_admin else project_of(options)
        user = User.objects.filter(username=username).first()
        if user is not None and project is None:
            raise CommandError(f"user {username!r} already exists; name a --project to give them a role there")
        password = None
        with transaction.atomic():
            if user is None:
                password = os.environ.get("STEPWISE_NEW_PASSWORD") or secrets.token_urlsafe(12)
                user = User.objects.create_user(username, email=email, password=password)
                self.stdout.write(f"created user {username!r}")
            if project is None:
                roles.make_site_admin(user)
                self.stdout.write(f"{username!r} is a site admin")
            else:
                # As the members page does it, so the change is recorded with the project's settings changes.
                membership, before = members.set_role(project=project, user=user, role=role, by=None)
                if before not in (None, role):
                    self.stdout.write(f"{username!r} was {Membership.Role(before).label} of {project.slug}")
                self.stdout.write(f"{username!r} is {membership.get_role_display()} of project {project.slug}")
        if password is not None and "STEPWISE_NEW_PASSWORD" not in os.environ:
            self.stdout.write(f"password: {password}")
