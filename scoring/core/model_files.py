"""The on-disk format of a model folder: reading and checking it, and the hash that names it.

No torch and no Django, so anything (the web process included) can validate or hash a
model without loading it.

    stepwise.json      {"kind": "head" | "step_token" | "token_classification",
                        "backbone": "<transformers folder, relative to this one>" or ".",
                        "separator": "\\n\\n",          # appended after each step
                        "head": {"type": "point" | "beta", "layer": int | null, "hidden_size": H},
                        # step_token:  "step_tag", "good_token_id", "bad_token_id"
                        # token_classification: "positive_label"
                        }
    head.safetensors   kind "head" only: mu.weight [1,H], mu.bias [1] (+ kappa.* for beta)
    meta.json          optional training metadata
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CONFIG_NAME = "stepwise.json"
HEAD_NAME = "head.safetensors"
META_NAME = "meta.json"
DEFAULT_SEPARATOR = "\n\n"
KINDS = ("head", "step_token", "token_classification")
# The kinds a version exports to as a plain transformers checkpoint (scoring.store.checkpoint_export).
EXPORT_KINDS = ("token_classification", "step_token")
# Files whose presence means someone expects us to unpickle weights; we never do.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
# Files that decide what a model computes: their hash identifies a model version.
IDENTITY_GLOBS = ("*.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", CONFIG_NAME)


class ModelFormatError(ValueError):
    """The folder is not a model we can load safely (missing files, pickle weights, bad config)."""


def write_model_config(folder: str | Path, config: dict[str, Any]) -> None:
    """Write stepwise.json after checking it describes a model we can load."""
    validate_config(config, where=str(Path(folder) / CONFIG_NAME))
    (Path(folder) / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")


def validate_config(config: dict[str, Any], *, where: str) -> None:
    """Fail with the offending field named, before anything is loaded."""
    kind = config.get("kind")
    if kind not in KINDS:
        raise ModelFormatError(f"{where}: 'kind' must be one of {KINDS}, not {kind!r}")
    if not isinstance(config.get("backbone"), str) or not config["backbone"]:
        raise ModelFormatError(f"{where}: 'backbone' must be a folder path (or '.')")
    if not isinstance(config.get("separator", DEFAULT_SEPARATOR), str) or config.get("separator") == "":
        raise ModelFormatError(f"{where}: 'separator' must be a non-empty string")
    if kind == "head":
        head = config.get("head")
        if (
            not isinstance(head, dict)
            or head.get("type") not in ("point", "beta")
            or not isinstance(head.get("hidden_size"), int)
        ):
            raise ModelFormatError(
                f"{where}: 'head' must be {{'type': 'point'|'beta', 'layer': int|null, 'hidden_size': int}}"
            )
        if head.get("layer") is not None and not isinstance(head["layer"], int):
            raise ModelFormatError(f"{where}: 'head.layer' must be an integer or null")
    if kind == "step_token":
        for key in ("good_token_id", "bad_token_id"):
            if not isinstance(config.get(key), int):
                raise ModelFormatError(f"{where}: '{key}' must be a token id (integer) for kind 'step_token'")


def read_model_config(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / CONFIG_NAME
    if not path.exists():
        raise ModelFormatError(f"{path} is missing: not a Stepwise model folder")
    config = read_json_object(path)
    validate_config(config, where=str(path))
    return config


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON file holding one object, or ModelFormatError naming the file and what is wrong."""
    if not path.exists():
        raise ModelFormatError(f"{path} is missing")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ModelFormatError(f"{path}: invalid JSON at line {error.lineno}: {error.msg}") from None
    if not isinstance(data, dict):
        raise ModelFormatError(f"{path}: must be a JSON object")
    return data


def backbone_folder(folder: str | Path, config: dict[str, Any]) -> Path:
    backbone: str = config["backbone"]  # a string: validate_config checked it
    return (Path(folder) / backbone).resolve()


def check_safetensors_only(folder: Path) -> None:
    """Refuse folders whose weights are pickles: unpickling runs arbitrary code."""
    if not folder.is_dir():
        raise ModelFormatError(f"backbone folder {folder} does not exist")
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise ModelFormatError(f"{folder} holds pickle weights ({', '.join(pickles)}); only safetensors are loaded")
    if not any(folder.glob("model*.safetensors")):
        raise ModelFormatError(f"{folder} has no model*.safetensors weights")


def identity_files(folder: str | Path) -> list[Path]:
    """The files whose bytes decide the model's scores (model folder + backbone), sorted."""
    folder = Path(folder).resolve()
    config = read_model_config(folder)
    roots = {folder, backbone_folder(folder, config)}
    files = {p for root in roots for pattern in IDENTITY_GLOBS for p in root.glob(pattern)}
    return sorted(files)


def weights_sha256(folder: str | Path) -> str:
    """One sha256 over the identity files (names relative to their folder, then bytes)."""
    return hash_files(identity_files(folder))


def backbone_fingerprint(folder: str | Path) -> str:
    """Identity of a backbone's weights: sha256 over its config.json and safetensors bytes (what the
    feature cache and the shared backbones are keyed by)."""
    folder = Path(folder).resolve()
    stamp = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.glob("*.safetensors"))]
    return _fingerprint(str(folder), json.dumps(stamp))


_FINGERPRINTS: dict[tuple[str, str], str] = {}


def _fingerprint(folder: str, stamp: str) -> str:
    # Hashing 270 MB takes a second; remember it while the files are unchanged.
    key = (folder, stamp)
    if key not in _FINGERPRINTS:
        names = ["config.json", *sorted(p.name for p in Path(folder).glob("*.safetensors"))]
        _FINGERPRINTS[key] = hash_files(Path(folder) / name for name in names)
    return _FINGERPRINTS[key]


def hash_files(paths: Iterable[Path]) -> str:
    """sha256 over each file's name and bytes, in the given order (missing files skipped)."""
    digest = hashlib.sha256()
    for path in paths:
        if not path.exists():
            continue
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
