"""The `--project SLUG` option every command that reads or writes a project's data takes.

Left out, it means the sole project; with several projects that is an error naming them, so a
command never works on a project nobody chose.
"""
from argparse import ArgumentParser

from django.core.management.base import CommandError

from annotate.models import Project


def add_project_option(parser: ArgumentParser) -> None:
    parser.add_argument("--project", metavar="SLUG", default=None,
                        help="The project's slug; may be left out while there is only one project")


def project_of(options: dict) -> Project:
    """The project `--project` names (the sole one when left out), or a CommandError naming the choices."""
    try:
        return Project.objects.named(options.get("project"))
    except LookupError as error:
        raise CommandError(str(error)) from None
