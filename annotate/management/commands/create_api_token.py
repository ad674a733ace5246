"""Print (creating if needed) the REST API token of a user, for scripts."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Print the API token of USERNAME, creating it if needed (--rotate replaces it)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--rotate", action="store_true", help="Delete the old token and issue a new one")

    def handle(self, *args, **opts) -> None:
        try:
            user = get_user_model().objects.get(username=opts["username"])
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user named {opts['username']!r}") from None
        if opts["rotate"]:
            Token.objects.filter(user=user).delete()
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(token.key)
