"""The step marker: the one token a PRM reads each step's score at, when the WHOLE text is tokenized.

A serving stack (vLLM's STEP pooler, a transformers snippet) tokenizes the scored text in one
call and pools at every occurrence of one token id. That is exact only when that id appears once
per step, whatever the text around it: a plain-text separator such as "\\n\\n" merges with its
neighbours ("\\n\\nStep" tokenizes as "\\n", "\\nStep" in SmolLM2), so a 3-step solution yields
one tag, not three. A special token added to the tokenizer (Qwen's `<extra_0>`, Stepwise's
`STEP_MARKER`) is never merged: tokenizers split special tokens out before anything else.

A model whose separator is such a special token is scored from the whole text here too
(`scoring.core.encoding.encode_many`), so Stepwise, the model card's snippet and a pooling server read
the same ids. `check_step_boundaries` runs the check on real texts; export and registration
refuse a model that fails it. No torch, no Django.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from scoring.core.model_files import ModelFormatError
from scoring.core.step_scores import build_input
from steps.splitting import split_steps

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# Stepwise's own marker (SmolLM2 has no single token for `ки` (2) or `<extra_0>` (5)).
STEP_MARKER = "<|step|>"
MAX_TEXTS = 48
# What a tokenizer is checked on: a handful of texts whose steps end in digits, letters, LaTeX,
# blank lines and list markers, the contexts where a separator merges. (Tests add real model
# responses through `boundary_texts(folder)`; the product reads nothing outside its own files.)
BUILT_IN_TEXTS: list[tuple[str, list[str]]] = [
    ("What is 12 + 7?", ["First add the ones: 2 + 7 = 9.", "Then the tens: 10.", "So 12 + 7 = 19."]),
    ("Solve 3x = 12.", ["Divide both sides by 3", "x = 4", "# Answer\n\n4"]),
    ("Find the roots of x^2 - 5x + 6.", ["We factor: $(x - 2)(x - 3)$", "\\boxed{2, 3}"]),
    ("Two dice are rolled. P(sum = 9)?", ["1. **Outcomes:** 36\n\n", "2. Favourable: (3,6), (4,5), (5,4), (6,3)",
                                          "\\[ \\frac{4}{36} = \\frac{1}{9} \\]"]),
    ("Compute 2^10.", ["2^10 = 1024.", "1024"]),
]

Item = tuple[str, Sequence[str]]


def marker_id(tokenizer: PreTrainedTokenizerBase, separator: str) -> int | None:
    """The separator's id when it is one special token of the tokenizer (whole-text scoring is then exact)."""
    for token_id, added in tokenizer.added_tokens_decoder.items():
        if added.content == separator and added.special:
            return int(token_id)
    return None


def step_tag_id(tokenizer: PreTrainedTokenizerBase, separator: str) -> int:
    """The id a step is read at: the marker, else the separator's last token tokenized alone."""
    marker = marker_id(tokenizer, separator)
    if marker is not None:
        return marker
    ids: list[int] = tokenizer(separator, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError(f"separator {separator!r} encodes to no tokens")
    return ids[-1]


def whole_text(problem: str, steps: Sequence[str], *, separator: str) -> str:
    return "".join(build_input(problem, steps, separator=separator))


def whole_text_ids(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> list[list[int]]:
    """Each text tokenized in one call with the tokenizer's own special tokens, as vLLM's /pooling does."""
    return token_ids(tokenizer, texts, special_tokens=True)


def token_ids(tokenizer: PreTrainedTokenizerBase, texts: list[str], *, special_tokens: bool) -> list[list[int]]:
    """The ids of each text, in one native call; with `special_tokens` the tokenizer's own
    (a BOS token, a template) are added as its __call__ adds them."""
    if not texts:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is not None:
        # The Rust tokenizer directly: the Python wrapper's per-text conversion (attention masks,
        # a BatchEncoding) costs as much again; encode_batch_fast (tokenizers >= 0.20) skips the
        # character offsets nobody reads here.
        encode_batch = getattr(backend, "encode_batch_fast", backend.encode_batch)
        return [encoding.ids for encoding in encode_batch(texts, add_special_tokens=special_tokens)]
    ids: list[list[int]] = tokenizer(texts, add_special_tokens=special_tokens)["input_ids"]
    return ids


def check_step_boundaries(
    tokenizer: PreTrainedTokenizerBase, separator: str, items: Iterable[Item], *, limit: int = 3
) -> list[str]:
    """What fails, one line per text (at most `limit`): texts where the whole-text tokenization does
    not hold the step tag exactly once per step. Empty when the separator is a sound step marker."""
    tag = step_tag_id(tokenizer, separator)
    problems = []
    items = list(items)
    texts = [whole_text(problem, steps, separator=separator) for problem, steps in items]
    for (_, steps), text, ids in zip(items, texts, whole_text_ids(tokenizer, texts)):
        found = ids.count(tag)
        if found != len(steps):
            problems.append(f"{found} step tags (id {tag}) for {len(steps)} steps in {text[:80]!r}")
            if len(problems) >= limit:
                break
    return problems


def require_step_marker(tokenizer: PreTrainedTokenizerBase, separator: str, *, where: str) -> None:
    """Refuse (ModelFormatError, naming the texts) a separator whose tag is not found once per step
    in real whole texts: what export and registration check before accepting a model."""
    texts = boundary_texts()
    problems = check_step_boundaries(tokenizer, separator, texts)
    if problems:
        raise ModelFormatError(f"{where}: {describe_failure(separator, problems, total=len(texts))}")


def describe_failure(separator: str, problems: list[str], *, total: int) -> str:
    return (
        f"the step separator {separator!r} does not survive whole-text tokenization in {len(problems)}"
        f"{'+' if len(problems) >= 3 else ''} of {total} texts (a server pooling at its token would misread "
        f"the steps): {'; '.join(problems)}. Use a separator that is one special token of the tokenizer "
        f"(Stepwise's {STEP_MARKER!r}, Qwen's '<extra_0>')"
    )


def boundary_texts(folder: Path | None = None) -> list[tuple[str, list[str]]]:
    """(problem, steps) to check with: the model responses of `folder`'s JSONL files split into
    steps (at most MAX_TEXTS), else the built-in ones."""
    items: list[tuple[str, list[str]]] = []
    for path in sorted(folder.glob("*.jsonl")) if folder is not None else []:
        with path.open() as handle:
            for line in handle:
                items.extend(_responses(json.loads(line)))
                if len(items) >= MAX_TEXTS:
                    return items
    return items or list(BUILT_IN_TEXTS)


def _responses(row: object) -> list[tuple[str, list[str]]]:
    if not isinstance(row, dict) or not isinstance(row.get("question"), str):
        return []
    responses = row.get("response")
    responses = [responses] if isinstance(responses, str) else responses if isinstance(responses, list) else []
    found = []
    for response in responses[:2]:
        steps = [s for s in split_steps(response) if s.strip()] if isinstance(response, str) else []
        if steps:
            found.append((row["question"], steps))
    return found
