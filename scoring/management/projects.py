"""`--project SLUG`, the same in every command of the model side."""
from django.core.management.base import CommandError, CommandParser

from annotate.models import Project


def add_project_argument(parser: CommandParser) -> None:
    parser.add_argument("--project", metavar="SLUG",
                        help="the project to work in (default: the only one, when exactly one exists)")


def registering_options(parser: CommandParser) -> None:
    """`--project` and `--make-current` of the commands that register a model version."""
    parser.add_argument("--project", metavar="SLUG",
                        help="the project it is registered in (default: none, a public PRM every project may use; "
                             "with --make-current, the only project)")
    parser.add_argument("--make-current", action="store_true",
                        help="make it the current model of --project (default: the only project)")


def registering_project(options: dict) -> Project | None:
    """The project a version is registered in: the one `--project` names, else none (a public PRM)
    unless it is made current, in the only project."""
    if options.get("project") or options.get("make_current"):
        return project_option(options)
    return None


def project_option(options: dict) -> Project:
    """The project `--project` names, or the sole one when it is left out (`Project.objects.named`);
    a CommandError naming the choices otherwise."""
    try:
        return Project.objects.named(options.get("project"))
    except LookupError as error:
        raise CommandError(f"--project: {error}") from None
