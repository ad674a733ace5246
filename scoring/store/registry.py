"""The model registry: which PRM versions exist, which is each project's current one, and loading
them safely.

A project's current model is its `CurrentModel` row, read and written here only
(`current_model`, `set_current_model`). Any version may be current in a project: one trained there,
one trained in another project, or a public PRM registered in none.

A version is its folder plus the sha256 of the files that decide its scores. Loading checks
the hash again, so a model whose files changed on disk is refused rather than silently
producing different scores under the old name.

Loaded models are cached per process (lazily, on first use inside the worker child: the
parent never touches CUDA) by weight fingerprint, in a small LRU of
`STEPWISE_MODEL_CACHE_SIZE` entries. Every head-only retrain is a new version on the same
backbone: a version loaded while another on the same backbone files is held reuses that
backbone (`scoring.core.model_loading.shared_backbone`, which a retrain's frozen features read
too), so the cache holds at most its size in backbones, however many versions exist.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.management.base import CommandError
from django.db import transaction

from annotate.models import Project
from scoring.core import model_files
from scoring.core.model_files import ModelFormatError, identity_files
from scoring.models import CurrentModel, ModelVersion
from scoring.store.remote_scorer import RemoteConfig, RemotePRM

if TYPE_CHECKING:
    from scoring.core.prm import LoadedPRM


class ModelIntegrityError(RuntimeError):
    """The files of a registered model no longer match the hash recorded for them."""


@dataclass
class _Cached:
    model: LoadedPRM
    # (name, size, mtime) of the identity files when last verified: a cheap stat on every use
    # notices files changed under a loaded model, and only then is everything hashed again.
    stamp: tuple


_loaded: OrderedDict[str, _Cached] = OrderedDict()  # weights_sha256 (+ options) -> model, oldest first
_lock = threading.Lock()


def register_model_version(
    *, name: str, path: str | Path, project: Project | None = None, parent: ModelVersion | None = None,
    metrics: dict | None = None, make_current: bool = False, trust_remote_code: bool = False,
) -> ModelVersion:
    """Record a model folder under a name (validated and hashed now), trained or registered in
    `project` (None: a public PRM any project may use); optionally make it current in `project`
    (None: in the sole project, an error naming the choices when there are several)."""
    folder = Path(path).resolve()
    config = model_files.read_model_config(folder)
    model_files.check_safetensors_only(model_files.backbone_folder(folder, config))
    if trust_remote_code and not settings.STEPWISE_ALLOW_TRUST_REMOTE_CODE:
        raise ValueError("trust_remote_code needs STEPWISE_ALLOW_TRUST_REMOTE_CODE=true")
    version = ModelVersion.objects.create(
        name=name, kind=config["kind"], path=str(folder), weights_sha256=model_files.weights_sha256(folder),
        parent=parent, config=config, metrics=metrics or {}, trust_remote_code=trust_remote_code, project=project,
    )
    if make_current:
        set_current_model(version, project=project or Project.objects.sole())
    return version


def register_remote_version(*, name: str, config: dict, project: Project | None = None,
                            make_current: bool = False) -> ModelVersion:
    """Record a PRM served at a /pooling endpoint (scoring.store.remote_scorer.RemoteConfig fields).

    Its path is the endpoint and its fingerprint the hash of what decides its scores (URL,
    served model, separator, read-out), so pointing a name at another server is a new version.
    Nothing is contacted here; a bad field raises ValueError naming it. `project` and
    `make_current` as for `register_model_version`.
    """
    remote = RemoteConfig.from_dict(config)
    version = ModelVersion.objects.create(
        name=name, kind=ModelVersion.Kind.REMOTE, path=remote.endpoint, weights_sha256=remote.fingerprint(),
        config=remote.to_dict(), project=project,
    )
    if make_current:
        set_current_model(version, project=project or Project.objects.sole())
    return version


def set_current_model(version: ModelVersion, *, project: Project) -> None:
    """Make `version` the project's current model (promoted); other projects keep theirs."""
    with transaction.atomic():
        CurrentModel.objects.update_or_create(project=project, defaults={"model_version": version})
        ModelVersion.objects.filter(pk=version.pk).update(status=ModelVersion.Status.PROMOTED)
    version.status = ModelVersion.Status.PROMOTED


def current_model(project: Project | int) -> ModelVersion | None:
    """The model the project scores its pool and selects its queue with; None until one is made current."""
    project_id = project if isinstance(project, int) else project.pk
    row = CurrentModel.objects.filter(project_id=project_id).select_related("model_version").first()
    return row.model_version if row else None


class UnknownModelVersion(LookupError):
    """A model version was asked for by a name no version has."""


def find_version(name: str | None, *, project: Project, anywhere: bool = False) -> ModelVersion | None:
    """The version called `name` among those the project may use (`ModelVersion.objects.usable_in`;
    `anywhere`: among all, for the site's operator), or the project's current one when no name is
    given (None if none is)."""
    if not name:
        return current_model(project)
    usable = ModelVersion.objects.all() if anywhere else ModelVersion.objects.usable_in(project)
    try:
        return usable.get(name=name)
    except ModelVersion.DoesNotExist:
        known = ", ".join(usable.order_by("name").values_list("name", flat=True)) or "none"
        raise UnknownModelVersion(f"{name!r}: no such model version in {project.slug} (known: {known})") from None


def version_for_command(name: str | None, *, project: Project | None = None, option: str = "--model") -> ModelVersion:
    """What a management command's `--model NAME` means: that version (any project's: the operator
    may score one project's pool with another's model), else the project's current one.

    Neither is a CommandError naming the option, worded the same by every command.
    """
    if not name and project is None:
        raise CommandError(f"{option}: name a model version")
    try:
        version = find_version(name, project=project, anywhere=True) if project else ModelVersion.objects.get(name=name)
    except (UnknownModelVersion, ModelVersion.DoesNotExist):
        known = ", ".join(ModelVersion.objects.order_by("name").values_list("name", flat=True)) or "none"
        raise CommandError(f"{option} {name!r}: no such model version (known: {known})") from None
    if version is None:
        where = f" in {project.slug}" if project else ""
        raise CommandError(f"no current model version{where}: run `manage.py init_default_model` or pass {option}")
    return version


def _files_stamp(version: ModelVersion) -> tuple:
    try:
        return tuple((str(path), path.stat().st_size, path.stat().st_mtime_ns) for path in identity_files(version.path))
    except (ModelFormatError, OSError) as error:
        raise ModelIntegrityError(f"model {version.name!r}: {error}") from None


def verify(version: ModelVersion) -> None:
    try:
        actual = model_files.weights_sha256(version.path)
    except (ModelFormatError, OSError) as error:
        raise ModelIntegrityError(f"model {version.name!r}: {error}") from None
    if actual != version.weights_sha256:
        raise ModelIntegrityError(
            f"model {version.name!r}: files in {version.path} changed (sha256 {actual[:12]}… "
            f"!= registered {version.weights_sha256[:12]}…); refusing to score with it"
        )


def load(version: ModelVersion, **options) -> LoadedPRM | RemotePRM:
    """The loaded model for a version: verified on load, then kept in the LRU (see above).

    A remote version gets its endpoint's client: nothing is loaded and no file is read.
    """
    if version.kind == ModelVersion.Kind.REMOTE:
        return _remote_client(version)
    # The dtype is part of what was loaded: a float32 request must not get a cached bfloat16 model.
    key = f"{version.weights_sha256}:{settings.STEPWISE_SCORING_DTYPE}:{sorted(options.items())}"
    with _lock:
        if key in _loaded:
            cached = _loaded[key]
            stamp = _files_stamp(version)
            if stamp != cached.stamp:
                try:
                    verify(version)
                except ModelIntegrityError:
                    del _loaded[key]  # a refused model holds no memory
                    raise
                cached.stamp = stamp
            _loaded.move_to_end(key)
            return cached.model
        from scoring.core import prm  # torch: loaded by the worker, never the web process

        verify(version)
        stamp = _files_stamp(version)
        trust = version.trust_remote_code and settings.STEPWISE_ALLOW_TRUST_REMOTE_CODE
        model = prm.load_prm(version.path, trust_remote_code=trust, dtype=_dtype_setting(),
                             max_tokens=settings.STEPWISE_SCORING_MAX_TOKENS, **options)
        _loaded[key] = _Cached(model, stamp)
        while len(_loaded) > max(1, settings.STEPWISE_MODEL_CACHE_SIZE):
            _loaded.popitem(last=False)  # the least recently used; its backbone goes when no one shares it
        return model


def _remote_client(version: ModelVersion) -> RemotePRM:
    try:
        remote = RemoteConfig.from_dict(version.config)
    except ValueError as error:
        raise ModelIntegrityError(f"model {version.name!r}: bad remote config: {error}") from None
    if remote.fingerprint() != version.weights_sha256:
        raise ModelIntegrityError(
            f"model {version.name!r}: its endpoint config changed since it was registered; "
            "register the new endpoint as a new version"
        )
    return RemotePRM(remote)


def cached_fingerprints() -> list[str]:
    """Weight fingerprints of the models this process holds, least recently used first."""
    with _lock:
        return [key.split(":", 1)[0] for key in _loaded]


def forget_loaded() -> None:
    """Drop cached models (tests, or a worker told to free memory)."""
    with _lock:
        _loaded.clear()


def _dtype_setting():
    import torch  # torch: the web process never loads it

    name = settings.STEPWISE_SCORING_DTYPE
    if name == "auto":
        return None
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
