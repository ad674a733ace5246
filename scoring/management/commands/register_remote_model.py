"""`manage.py register_remote_model NAME URL --separator S [...]`: a model version served at a /pooling endpoint.

    ./stepwise manage register_remote_model math-shepherd http://gpu-1:8000 \\
        --served-model peiyi9979/math-shepherd-mistral-7b-prm --separator " ки\\n" --positive-index 0 --check

`--check` scores one short solution through the endpoint before anything is recorded.
"""
from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from scoring.management.projects import registering_options, registering_project
from scoring.store import registry
from scoring.store.remote_scorer import RemoteConfig, RemotePRM, RemoteScoringError

CHECK_ITEM = ("What is 1 + 1?", ["1 + 1 = 2.", "# Answer\n\n2"])


class Command(BaseCommand):
    help = "Register a PRM served at a vLLM-compatible /pooling endpoint as a model version."

    def add_arguments(self, parser):
        parser.add_argument("name", help="the new version's name")
        parser.add_argument("url", help="the server's base URL (requests go to URL/pooling)")
        parser.add_argument("--served-model", default="", help="the model name the server serves (default: NAME)")
        parser.add_argument("--separator", required=True,
                            help="appended after each step; must end in the token the server pools at (step_tag_id)")
        parser.add_argument("--positive-index", type=int, default=1,
                            help="entry of each step's output that is P(good): 0 for [+, -], 1 for 2 labels")
        parser.add_argument("--api-key-env", default="", help="environment variable holding the bearer token")
        parser.add_argument("--concurrency", type=int, default=4, help="requests in flight at once")
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
        parser.add_argument("--retries", type=int, default=3, help="further attempts on 429/5xx/timeouts")
        parser.add_argument("--batch-size", type=int, default=16, help="solutions per request")
        registering_options(parser)
        parser.add_argument("--check", action="store_true", help="score one solution through it first")

    def handle(self, *args, name, url, **options):
        config = {
            "url": url, "served_model": options["served_model"] or name,
            # A shell passes "\n" as two characters; the separator means a newline.
            "separator": options["separator"].replace("\\n", "\n").replace("\\t", "\t"),
            **{key: options[key] for key in ("positive_index", "api_key_env", "concurrency", "timeout",
                                             "retries", "batch_size")},
        }
        try:
            remote = RemoteConfig.from_dict(config)
        except ValueError as error:
            raise CommandError(f"remote model config: {error}") from None
        if options["check"]:
            try:
                steps = RemotePRM(remote).step_probabilities([CHECK_ITEM])[0]
            except RemoteScoringError as error:
                raise CommandError(f"--check: {error}") from None
            self.stdout.write(f"Checked: {len(steps)} steps scored, p = {[round(s.p, 4) for s in steps]}")
        try:
            project = registering_project(options)
            version = registry.register_remote_version(name=name, config=config, project=project,
                                                       make_current=options["make_current"])
        except IntegrityError:
            raise CommandError(f"a model version named {name!r} already exists") from None
        current = f" (current in {project.slug})" if project and options["make_current"] else ""
        self.stdout.write(f"Registered remote model version {version.name}{current} at {version.path}.")
