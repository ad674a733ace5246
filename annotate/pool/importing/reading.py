"""Reading a JSONL file: streaming its lines, counting them, telling its format and split.

Everything here streams in binary, so a multi-gigabyte file costs constant memory; a line
that is not JSON comes out as ``BadJson`` in its place rather than stopping the file. So
does a line over the limits (``STEPWISE_IMPORT_MAX_LINE_BYTES``, read in pieces and never
held whole; ``STEPWISE_MAX_JSON_DEPTH``, checked as it decodes, since ``json.loads``
recurses per level): the error names the limit and the rest of the file still imports.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from annotate.pool.importing.formats import detect_format
from infra.limits import TooDeep, loads_bounded

SPLIT_NAMES = {"train", "test", "val", "valid", "validation", "dev"}


@dataclass
class BadJson:
    """A line that could not be decoded, with why, to be reported against its line number."""

    message: str


# A line over the byte limit stands in its place as this, its bytes skipped unread.
_TOO_LONG = b"<too long>"
_SKIP_CHUNK = 1024 * 1024


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, decoded object or BadJson) for every non-blank line, streaming."""
    max_bytes, max_depth = settings.STEPWISE_IMPORT_MAX_LINE_BYTES, settings.STEPWISE_MAX_JSON_DEPTH
    with open(path, "rb") as handle:
        for line_no, raw in enumerate(_bounded_lines(handle, max_bytes), start=1):
            if raw is _TOO_LONG:
                yield line_no, BadJson(f"is longer than {max_bytes:,} bytes (STEPWISE_IMPORT_MAX_LINE_BYTES)")
            elif raw.strip():
                yield line_no, _decode(raw, max_depth)


def _decode(raw: bytes, max_depth: int) -> Any:
    try:
        return loads_bounded(raw, max_depth)
    except TooDeep:
        return BadJson(f"nests deeper than {max_depth} levels (STEPWISE_MAX_JSON_DEPTH)")
    except UnicodeDecodeError as error:
        return BadJson(f"is not UTF-8 text ({error.reason} at byte {error.start})")
    except json.JSONDecodeError as error:
        return BadJson(f"is not valid JSON: {error.msg} at column {error.colno}")


def _bounded_lines(handle: IO[bytes], max_bytes: int) -> Iterator[bytes]:
    """Every line of `handle`, one longer than `max_bytes` (newline aside) as _TOO_LONG."""
    while raw := handle.readline(max_bytes + 1):
        if len(raw) <= max_bytes or raw.endswith(b"\n"):
            yield raw
            continue
        # Skip the rest of the long line in pieces, so it is never held whole.
        while (rest := handle.readline(_SKIP_CHUNK)) and not rest.endswith(b"\n"):
            pass
        yield _TOO_LONG


def count_lines(path: Path) -> int:
    """Non-blank lines, read in bounded pieces (fast, constant memory)."""
    with open(path, "rb") as handle:
        return sum(1 for raw in _bounded_lines(handle, settings.STEPWISE_IMPORT_MAX_LINE_BYTES) if raw.strip())


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
