"""Model versions out of Stepwise: the facts for the model card, the export folder, and the
.zip the models page offers.

The archive's name holds the version's weight hash and the export kind, and it is written under a
temporary name then renamed, so building it is idempotent: a rerun (a redelivered task, a second
click) finds it and does nothing, and a worker killed mid-export leaves no file a download could serve.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

from django.conf import settings
from django.utils.text import slugify

from annotate.models import Annotation
from scoring.core.model_files import META_NAME
from scoring.models import ModelVersion
from scoring.store import registry

ARCHIVE_FOLDER = "models"


def version_facts(version: ModelVersion) -> dict:
    """What the model card says about a version: its data counts, generations and evaluation."""
    meta_path = Path(version.path) / META_NAME
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    facts = {"name": version.name, "metrics": version.metrics, "data": meta.get("data")}
    run = version.training_runs.order_by("-created_at").first()
    if run is not None:
        labels = Annotation.objects.trainable().filter(project=run.project_id, created_at__lte=run.created_at)
        facts["n_labels"] = run.n_labels
        facts["generations"] = sorted(
            g for g in labels.values_list("generation", flat=True).distinct() if g is not None
        )
    return facts


def export_version(*, version: ModelVersion, out: str | Path, as_kind: str, serve_as: str = "transformers"):
    """Verify the version's files against its hash, then write the standard checkpoint to `out`
    (`serve_as="vllm"`: the form vLLM's pooling runner serves; see checkpoint_export)."""
    from scoring.store.checkpoint_export import export_checkpoint  # torch, transformers: the export task only

    registry.verify(version)
    return export_checkpoint(version.path, out, as_kind=as_kind, facts=version_facts(version), serve_as=serve_as)


def archive_path(version: ModelVersion, as_kind: str) -> Path:
    name = f"{slugify(version.name) or 'model'}-{as_kind}-{version.weights_sha256[:12]}.zip"
    return Path(settings.EXPORTS_DIR) / ARCHIVE_FOLDER / name


def build_archive(*, version: ModelVersion, as_kind: str) -> Path:
    """The version's export as a .zip under the exports folder (built once; see the docstring)."""
    target = archive_path(version, as_kind)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_work(target.parent)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".work-") as work:
        folder = Path(work) / target.stem
        export_version(version=version, out=folder, as_kind=as_kind)
        partial = Path(work) / (target.name + ".partial")
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(folder.iterdir()):
                archive.write(path, arcname=f"{target.stem}/{path.name}")
        shutil.move(partial, target)  # same folder tree: an atomic rename
    return target


def _remove_stale_work(folder: Path) -> None:
    """Work folders of exports killed mid-run (no cleanup ran): older than any task may live."""
    cutoff = time.time() - 2 * settings.CELERY_TASK_TIME_LIMIT
    for work in folder.glob(".work-*"):
        if work.is_dir() and work.stat().st_mtime < cutoff:
            shutil.rmtree(work, ignore_errors=True)


def finished_archive(version: ModelVersion, as_kind: str) -> Path | None:
    """The archive if it is built and really lies in the exports folder (never a planted link)."""
    path = archive_path(version, as_kind).resolve()
    if not path.is_relative_to(Path(settings.EXPORTS_DIR).resolve()) or not path.is_file():
        return None
    return path
