"""Reading a JSONL file: streaming its lines, counting them, telling its format and split.

Everything here streams in binary, so a multi-gigabyte file costs constant memory; a line
that is not JSON comes out as ``BadJson`` in its place rather than stopping the file.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .formats import detect_format

SPLIT_NAMES = {"train", "test", "val", "valid", "validation", "dev"}


@dataclass
class BadJson:
    """A line that could not be decoded, with why, to be reported against its line number."""

    message: str


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, decoded object or BadJson) for every non-blank line, streaming."""
    with open(path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                yield line_no, json.loads(raw)
            except UnicodeDecodeError as error:
                yield line_no, BadJson(f"is not UTF-8 text ({error.reason} at byte {error.start})")
            except json.JSONDecodeError as error:
                yield line_no, BadJson(f"is not valid JSON: {error.msg} at column {error.colno}")


def count_lines(path: Path) -> int:
    """Non-blank lines, counted in binary chunks (fast, constant memory)."""
    count = 0
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                count += 1
    return count


def detect_file_format(path: Path) -> str | None:
    """The format of the first line that is a JSON object, or None when none is recognisable."""
    for _, obj in read_jsonl(path):
        if isinstance(obj, dict):
            found = detect_format(obj)
            if found:
                return found
    return None


def split_of(path: Path) -> str:
    """The dataset split a file's name says (``train.jsonl`` → ``train``), else empty."""
    stem = path.stem.lower()
    return stem if stem in SPLIT_NAMES else ""


def file_digest(path: Path) -> str:
    """SHA-256 of the file's bytes, read in chunks: what makes a line "the same line" on a re-import."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
