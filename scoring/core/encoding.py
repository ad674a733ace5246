"""Encoding solutions for a PRM: token ids, and the position each step's score is read at.

A solution is the problem, then each step followed by the separator; a step's score is read at
its separator's last token (`scoring.core.prm` runs the model on these). A separator that is a
special token (a step marker, `scoring.core.step_marker`) is found in the whole text tokenized at
once; any other is read piece by piece. Then `token_budget_batches` groups encoded solutions into
forward batches. No torch, no Django: only a tokenizer is needed.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scoring.core.model_files import DEFAULT_SEPARATOR, ModelFormatError
from scoring.core.step_marker import marker_id, whole_text, whole_text_ids
from scoring.core.step_scores import build_input

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Item = tuple[str, Sequence[str]]


@dataclass
class Encoded:
    ids: list[int]
    positions: list[int]  # index of each step's separator's last token in ids


def encode(
    tokenizer: PreTrainedTokenizerBase, problem: str, steps: Sequence[str], *, separator: str = DEFAULT_SEPARATOR
) -> Encoded:
    return encode_many(tokenizer, [(problem, steps)], separator=separator)[0]


def encode_many(
    tokenizer: PreTrainedTokenizerBase, items: Sequence[Item], *, separator: str = DEFAULT_SEPARATOR
) -> list[Encoded]:
    """Encode many solutions with one (batched, native) tokenizer call over all pieces.

    A separator that is a special token (a step marker, `scoring.core.step_marker`) is read from
    the whole text, tokenized in one call as a pooling server does; any other separator is read
    piece by piece (each piece alone, the BOS token first), as models registered before it were.
    """
    marker = marker_id(tokenizer, separator)
    if marker is not None:
        return _encode_whole(tokenizer, items, separator=separator, marker=marker)
    pieces = [build_input(problem, steps, separator=separator) for problem, steps in items]
    flat = [piece for solution in pieces for piece in solution]
    token_lists = iter(_token_ids(tokenizer, flat))
    start = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    encoded = []
    for solution in pieces:
        ids, positions = list(start), []
        for index in range(len(solution)):
            ids.extend(next(token_lists))
            if index:
                positions.append(len(ids) - 1)
        encoded.append(Encoded(ids=ids, positions=positions))
    return encoded


def _encode_whole(
    tokenizer: PreTrainedTokenizerBase, items: Sequence[Item], *, separator: str, marker: int
) -> list[Encoded]:
    texts = [whole_text(problem, steps, separator=separator) for problem, steps in items]
    encoded = []
    for (_, steps), text, ids in zip(items, texts, whole_text_ids(tokenizer, texts)):
        positions = [index for index, token in enumerate(ids) if token == marker]
        if len(positions) != len(steps):
            raise ModelFormatError(
                f"{len(positions)} step markers {separator!r} for {len(steps)} steps: the text holds the marker "
                f"itself ({text[:80]!r})"
            )
        encoded.append(Encoded(ids=ids, positions=positions))
    return encoded


def _token_ids(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> list[list[int]]:
    if not texts:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is not None:
        # The Rust tokenizer directly: the Python wrapper's per-text conversion costs as much again;
        # encode_batch_fast (tokenizers >= 0.20) skips the character offsets nobody reads here.
        encode_batch = getattr(backend, "encode_batch_fast", backend.encode_batch)
        return [encoding.ids for encoding in encode_batch(texts, add_special_tokens=False)]
    ids: list[list[int]] = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return ids


def token_budget_batches(lengths: Sequence[int], *, max_tokens: int) -> Iterator[list[int]]:
    """Indices grouped longest-first so that (longest in batch) x (batch size) <= max_tokens.

    Sorting by length keeps padding small; a single over-budget item gets a batch alone.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch: list[int] = []
    for index in order:
        width = lengths[batch[0]] if batch else lengths[index]
        if batch and width * (len(batch) + 1) > max_tokens:
            yield batch
            batch = []
        batch.append(index)
    if batch:
        yield batch
