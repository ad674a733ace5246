"""Encoding solutions for a PRM: token ids, and the position each step's score is read at.

A solution is the problem, then each step followed by the separator; a step's score is read at
its separator's last token (`scoring.core.prm` runs the model on these). A separator that is a
special token (a step marker, `scoring.core.step_marker`) is found in the whole text tokenized at
once; any other is read piece by piece. Then `token_budget_batches` groups encoded solutions into
forward batches. No torch, no Django: only a tokenizer is needed.

A public checkpoint is fed the input its model card builds (its stepwise.json's `input_format`),
since a PRM scores well only on the input it was trained on:

- `math_shepherd` (peiyi9979/math-shepherd-mistral-7b-prm): `f"{question} {output}"`, where the
  output is the steps, each `Step n: ...` (Math-Shepherd's data numbers every step; a step that
  already starts so keeps its own) closed by " ки", joined by newlines; tokenized with the
  tokenizer's own special tokens (`tokenizer.encode`); read wherever the id of `ки` is.
- `qwen_prm` (Qwen2.5-Math-PRM): the tokenizer's chat template over Qwen's system prompt, the
  question and `"<extra_0>".join(steps) + "<extra_0>"` as the assistant turn; read wherever the
  id of `<extra_0>` is.
- `stepwise` (the default): Stepwise's own, above.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scoring.core.model_files import DEFAULT_SEPARATOR, ModelFormatError
from scoring.core.step_marker import marker_id, token_ids, whole_text, whole_text_ids
from scoring.core.step_scores import build_input

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Item = tuple[str, Sequence[str]]

INPUT_FORMATS = ("stepwise", "math_shepherd", "qwen_prm")
# The token each model card reads a step at.
FORMAT_TAGS = {"math_shepherd": "ки", "qwen_prm": "<extra_0>"}
# Qwen2.5-Math-PRM's model card: the system turn of every scored conversation.
QWEN_PRM_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
_NUMBERED_STEP = re.compile(r"Step \d+:")


@dataclass
class Encoded:
    ids: list[int]
    positions: list[int]  # index of each step's separator's last token in ids


def encode(
    tokenizer: PreTrainedTokenizerBase, problem: str, steps: Sequence[str], *, separator: str = DEFAULT_SEPARATOR,
    input_format: str = "stepwise",
) -> Encoded:
    return encode_many(tokenizer, [(problem, steps)], separator=separator, input_format=input_format)[0]


def encode_many(
    tokenizer: PreTrainedTokenizerBase, items: Sequence[Item], *, separator: str = DEFAULT_SEPARATOR,
    input_format: str = "stepwise",
) -> list[Encoded]:
    """Encode many solutions with one (batched, native) tokenizer call over all pieces.

    A public checkpoint's `input_format` builds its model card's text (module docstring). In
    Stepwise's own, a separator that is a special token (a step marker, `scoring.core.step_marker`)
    is read from the whole text, tokenized in one call as a pooling server does; any other separator
    is read piece by piece (each piece alone, the BOS token first), as models registered before it were.
    """
    if input_format != "stepwise":
        texts = [format_text(tokenizer, problem, steps, input_format=input_format) for problem, steps in items]
        return _encode_at_tag(tokenizer, items, texts, tag=FORMAT_TAGS[input_format],
                              tag_id=format_tag_id(tokenizer, input_format))
    marker = marker_id(tokenizer, separator)
    if marker is not None:
        return _encode_whole(tokenizer, items, separator=separator, marker=marker)
    pieces = [build_input(problem, steps, separator=separator) for problem, steps in items]
    flat = [piece for solution in pieces for piece in solution]
    token_lists = iter(token_ids(tokenizer, flat, special_tokens=False))
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
    return _encode_at_tag(tokenizer, items, texts, tag=separator, tag_id=marker)


def _encode_at_tag(
    tokenizer: PreTrainedTokenizerBase, items: Sequence[Item], texts: list[str], *, tag: str, tag_id: int
) -> list[Encoded]:
    """Whole texts tokenized in one call, each step read wherever the tag's id is (once per step)."""
    encoded = []
    for (_, steps), text, ids in zip(items, texts, whole_text_ids(tokenizer, texts)):
        positions = tag_positions(ids, tag_id)
        if len(positions) != len(steps):
            raise ModelFormatError(
                f"{len(positions)} step tags {tag!r} for {len(steps)} steps: the text holds the tag itself, "
                f"or the tokenizer merges it with its neighbours ({text[:80]!r})"
            )
        encoded.append(Encoded(ids=ids, positions=positions))
    return encoded


def tag_positions(ids: list[int], tag_id: int) -> list[int]:
    """Every index of `tag_id` in `ids`. list.index scans in C: a comprehension over every token
    was a seventh of tokenizing a solution."""
    positions: list[int] = []
    try:
        while True:
            positions.append(ids.index(tag_id, positions[-1] + 1 if positions else 0))
    except ValueError:
        return positions


# --- public checkpoints' own inputs ------------------------------------------------------------


def input_format(config: dict[str, Any], *, where: str = "stepwise.json") -> str:
    """A model config's `input_format` ("stepwise" when absent), or ModelFormatError naming the field."""
    found = config.get("input_format", "stepwise")
    if found not in INPUT_FORMATS:
        raise ModelFormatError(f"{where}: 'input_format' must be one of {INPUT_FORMATS}, not {found!r}")
    return str(found)


def format_tag_id(tokenizer: PreTrainedTokenizerBase, input_format: str) -> int:
    """The id the model card reads a step at: its tag, which must be ONE token of this tokenizer
    (as `ки` is of Mistral's and `<extra_0>` of Qwen2.5's; SmolLM2 splits them into 2 and 5)."""
    tag = FORMAT_TAGS[input_format]
    ids: list[int] = tokenizer(tag, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ModelFormatError(
            f"the step tag {tag!r} is {len(ids)} tokens in this tokenizer, not one: "
            f"not the tokenizer of a {input_format} checkpoint"
        )
    return ids[0]


def format_text(tokenizer: PreTrainedTokenizerBase, problem: str, steps: Sequence[str], *, input_format: str) -> str:
    """The text the model card of `input_format` scores (module docstring)."""
    if input_format == "math_shepherd":
        tag = FORMAT_TAGS["math_shepherd"]
        return f"{problem.strip()} " + "\n".join(f"{_numbered(i, step.strip())} {tag}" for i, step in enumerate(steps))
    if getattr(tokenizer, "chat_template", None) is None:
        raise ModelFormatError("the tokenizer has no chat_template: the qwen_prm input is a chat")
    tag = FORMAT_TAGS["qwen_prm"]
    messages = [{"role": "system", "content": QWEN_PRM_SYSTEM}, {"role": "user", "content": problem.strip()},
                {"role": "assistant", "content": tag.join(step.strip() for step in steps) + tag}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert isinstance(text, str)  # tokenize=False: the rendered template
    return text


def _numbered(index: int, step: str) -> str:
    return step if _NUMBERED_STEP.match(step) else f"Step {index + 1}: {step}"


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
