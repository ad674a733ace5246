"""`manage.py register_model FOLDER --style math_shepherd|qwen_prm|token_classification [--name N]
[--separator S] [--good-token T] [--bad-token T] [--trust-remote-code] [--make-current]`:
a public PRM checkpoint folder as a model version (see scoring.store.public_checkpoints).

math_shepherd and qwen_prm folders are scored on their model cards' own input; before a folder is
accepted its config is read and its model built with shapes only, so a class transformers cannot
build or weights the checkpoint lacks are refused here, not at the first rescore."""
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scoring.core.model_files import CONFIG_NAME, ModelFormatError, write_model_config
from scoring.management.projects import registering_options, registering_project
from scoring.models import ModelVersion
from scoring.store import registry
from scoring.store.public_checkpoints import STYLES, describe_checkpoint


class Command(BaseCommand):
    help = "Write (or check) a checkpoint folder's stepwise.json and register it as a model version."

    def add_arguments(self, parser):
        parser.add_argument("folder")
        parser.add_argument("--style", choices=sorted(STYLES), required=True)
        parser.add_argument("--name", help="version name (default: the folder's name)")
        parser.add_argument("--separator", "--step-tag", dest="separator",
                            help="token_classification / step_token styles: text appended after each step, "
                                 "its last token the step tag (math_shepherd and qwen_prm use their cards' tags)")
        parser.add_argument("--good-token", help="step_token styles: the token whose logit says good (default '+')")
        parser.add_argument("--bad-token", help="step_token styles: the token whose logit says bad (default '-')")
        parser.add_argument("--trust-remote-code", action="store_true",
                            help="load the folder's own modeling code (needs STEPWISE_ALLOW_TRUST_REMOTE_CODE=true; "
                                 "Qwen2.5-Math-PRM never does: Stepwise defines its model)")
        registering_options(parser)

    def handle(self, *args, folder, style, name=None, separator=None, good_token=None, bad_token=None,
               trust_remote_code=False, make_current=False, **options):
        project = registering_project(options | {"make_current": make_current})
        folder_path = Path(folder).resolve()
        name = name or folder_path.name
        if ModelVersion.objects.filter(name=name).exists():
            raise CommandError(f"a model version called {name!r} already exists (--name)")
        if trust_remote_code and not settings.STEPWISE_ALLOW_TRUST_REMOTE_CODE:
            raise CommandError("--trust-remote-code needs STEPWISE_ALLOW_TRUST_REMOTE_CODE=true")
        config_path = folder_path / CONFIG_NAME
        before = config_path.read_text() if config_path.exists() else None
        try:
            config = describe_checkpoint(folder_path, style=style, separator=separator, good_token=good_token,
                                         bad_token=bad_token, trust_remote_code=trust_remote_code)
            write_model_config(folder_path, config)
            version = registry.register_model_version(name=name, path=folder_path, project=project,
                                                      make_current=make_current,
                                                      trust_remote_code=trust_remote_code,
                                                      metrics={"source": f"registered {style} checkpoint"})
        except (ModelFormatError, ValueError, OSError) as error:
            _restore(config_path, before)  # nothing half-written: the folder is as it was
            raise CommandError(str(error)) from None
        self.stdout.write(f"Registered {version.name} ({config['kind']}, step tag id {config['step_tag_id']}).")


def _restore(path: Path, text: str | None) -> None:
    if text is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(text)
