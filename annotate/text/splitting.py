"""Splitting a solution text into the steps annotators rate: the one step splitter.

Plain string functions with no Django imports, used by the importer and the splitting
benchmark. A split has two stages:

1. **Cut** the text into pieces at the boundaries the mode allows, never inside a math or
   code block (``math_blocks``): ``blank_line`` cuts at blank lines, ``line`` at every line
   break, ``sentence`` also after each sentence; ``auto`` is ``blank_line`` when the text has
   blank-line paragraphs and ``line`` otherwise.
2. **Merge** the pieces that are not steps on their own (``merge=False`` skips this, which is
   how splitting worked before and what the benchmark compares with):

   - a lead-in (a piece ending in ``:``, or a Markdown heading) joins the piece it
     introduces: "we can multiply these values together:" is not a claim anyone can rate
     without the equation after it;
   - a lone equation (no words outside math) and a display block that continues an
     unfinished sentence join the piece before;
   - a piece starting in lower case ("where r is the radius") continues the one before;
   - the PRM800K answer block (``# Answer`` and what follows) joins the step that reaches it.
     GSM8K's final ``#### N`` line stays a step of its own, as its importer always had it.

Steps are cut from the text, never rewritten: joining them keeps every non-whitespace
character. ``explicit`` is for imports whose lines give their steps as a list; it never
splits text (``split_steps`` refuses it).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from annotate.text.answers import _ANSWER_HEADING as ANSWER_HEADING
from annotate.text.answers import strip_calculator_annotations

SplitMode = Literal["auto", "blank_line", "line", "sentence", "explicit"]
SPLIT_MODES: tuple[SplitMode, ...] = ("auto", "blank_line", "line", "sentence", "explicit")
# The names of the first version (``--split blank|lines``), still accepted.
_ALIASES: dict[str, SplitMode] = {"blank": "blank_line", "lines": "line"}

_OPENER = re.compile(r"```|\$\$|\\\[|\\\(|\\begin\{([^{}]+)\}|\[asy\]|\$")
_DISPLAY_CLOSERS = {"```": "```", "$$": "$$", "\\[": "\\]", "[asy]": "[/asy]"}
_BLANK_LINE = re.compile(r"\n[ \t]*\n\s*")
_LINE_BREAK = re.compile(r"\n\s*")
_SPACE = re.compile(r"\s+")
_GSM8K_FINAL = re.compile(r"####[ \t]*\S")
_HEADING = re.compile(r"#{1,6}[ \t]+\S[^\n]*")
_COMMAND = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"[^\W\d_]{2,}")
_EMPHASIS_TAIL = re.compile(r"[\s*_]+$")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?:\$|\\\)|\\\])?$")
_SENTENCE_START = re.compile(r"[A-Z]|\$|\\\(|\*\*")
_AFTER_DISPLAY = re.compile(r"[ \t]*(?=[A-Z])")
_ABBREVIATION = re.compile(r"[\s(](?:e\.g|i\.e|etc|vs|cf|Mr|Mrs|Ms|Dr|St|No|Fig)\.$")
_LIST_NUMBER = re.compile(r"[ \t]*\d{1,3}[.)]")


@dataclass(frozen=True)
class Block:
    """A math or code block of a text: ``text[start:end]``, never cut."""

    start: int
    end: int
    display: bool  # on a line of its own in rendering: \\[ \\], $$ $$, environments, code, [asy]


def check_mode(mode: str) -> SplitMode:
    """The split mode `mode` names (the old names ``blank`` and ``lines`` included), or ValueError."""
    mode = _ALIASES.get(mode, mode)
    if mode not in SPLIT_MODES:
        raise ValueError(f"unknown split mode {mode!r}; expected one of {', '.join(SPLIT_MODES)}")
    return mode


def split_steps(text: str, mode: str = "auto", *, merge: bool = True) -> list[str]:
    """The steps of a solution text, split as the module docstring says."""
    mode = check_mode(mode)
    if mode == "explicit":
        raise ValueError("split mode 'explicit' takes each line's steps as given; it never splits text")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    blocks = math_blocks(text)
    if mode == "auto":
        mode = "blank_line" if _cuts(text, blocks, _BLANK_LINE) else "line"
    spans = list(_pieces(text, blocks, mode))
    if merge:
        spans = _merged(text, spans, blocks)
    return [text[start:end] for start, end in spans]


def math_blocks(text: str) -> list[Block]:
    """The math and code blocks of `text`, in order, none inside another.

    Display: ``\\[ \\]``, ``$$ $$``, ``\\begin{env} \\end{env}`` (nested ones counted),
    code fences and MATH's ``[asy]`` pictures; inline: ``\\( \\)`` and ``$ $`` by Pandoc's
    rule (no space just inside either dollar, no digit right after the closing one) and
    on one line, so that GSM8K's "$2 per egg, ... = $<<9*2=18>>18" is not math (one inline
    formula in 3,500 of MATH-500 crosses a line). An opener that is never closed (a
    truncated generation) is plain text.
    """
    blocks: list[Block] = []
    pos = 0
    while (match := _OPENER.search(text, pos)) is not None:
        end = None if _escaped(text, match.start()) else _closing(text, match)
        if end is None:
            pos = match.start() + 1
            continue
        token = match.group(0)
        blocks.append(Block(match.start(), end, display=token not in ("$", "\\(")))
        pos = end
    return blocks


def _escaped(text: str, index: int) -> bool:
    # \\[ is a LaTeX line break followed by "[", and \$ a literal dollar: count the backslashes.
    if text[index] not in "\\$":
        return False
    backslashes = 0
    while index - backslashes - 1 >= 0 and text[index - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _closing(text: str, opener: re.Match) -> int | None:
    """Where the block that `opener` starts ends (just past its closer), or None if it never does."""
    token, start = opener.group(0), opener.end()
    if token in _DISPLAY_CLOSERS:
        end = _find_unescaped(text, _DISPLAY_CLOSERS[token], start)
        return None if end is None else end + len(_DISPLAY_CLOSERS[token])
    if token == "\\(":
        end = _find_unescaped(text, "\\)", start)
        return None if end is None or _BLANK_LINE.search(text, start, end) else end + 2
    if token == "$":
        return _closing_dollar(text, start)
    return _closing_environment(text, opener.group(1), start)


def _find_unescaped(text: str, closer: str, start: int) -> int | None:
    while (index := text.find(closer, start)) != -1:
        if not _escaped(text, index):
            return index
        start = index + 1
    return None


def _closing_dollar(text: str, start: int) -> int | None:
    if start >= len(text) or text[start].isspace():
        return None
    index = start
    while (index := text.find("$", index)) != -1:
        if "\n" in text[start:index]:
            return None
        followed_by_digit = index + 1 < len(text) and text[index + 1].isdigit()
        if not _escaped(text, index) and not text[index - 1].isspace() and not followed_by_digit:
            return index + 1
        index += 1
    return None


def _closing_environment(text: str, name: str, start: int) -> int | None:
    pattern = re.compile(r"\\(begin|end)\{" + re.escape(name) + r"\}")
    depth = 1
    for match in pattern.finditer(text, start):
        depth += 1 if match.group(1) == "begin" else -1
        if depth == 0:
            return match.end()
    return None


def _inside(blocks: list[Block], index: int) -> bool:
    return any(block.start < index < block.end for block in blocks)


def _cuts(text: str, blocks: list[Block], separator: re.Pattern) -> list[tuple[int, int]]:
    """The separator runs of `text` (start, end) that lie outside every block."""
    return [(m.start(), m.end()) for m in separator.finditer(text)
            if not _inside(blocks, m.start()) and not _inside(blocks, m.end() - 1)]


def _pieces(text: str, blocks: list[Block], mode: SplitMode) -> Iterator[tuple[int, int]]:
    """The pieces of `text` between the cuts `mode` makes, whitespace trimmed, empty ones left out."""
    cuts = _cuts(text, blocks, _BLANK_LINE if mode == "blank_line" else _LINE_BREAK)
    if mode == "sentence":
        cuts = sorted(set(cuts) | set(_sentence_cuts(text, blocks)))
    start = 0
    for cut_start, cut_end in [*cuts, (len(text), len(text))]:
        piece = _trimmed(text, start, cut_start)
        if piece is not None:
            yield piece
        start = max(start, cut_end)


def _trimmed(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _sentence_cuts(text: str, blocks: list[Block]) -> Iterator[tuple[int, int]]:
    # A space after ".", "?" or "!" (maybe closing a quote or inline math) before a capital;
    # and the end of a display block before a capital: MATH writes "\\end{align*} Now, ...".
    for start, end in _cuts(text, blocks, _SPACE):
        before, after = " " + text[max(0, start - 40):start], text[end:end + 2]
        line = text[text.rfind("\n", 0, start) + 1:start]
        if (_SENTENCE_END.search(before) and _SENTENCE_START.match(after) and not _ABBREVIATION.search(before)
                and not _LIST_NUMBER.fullmatch(line)):
            yield start, end
    for block in blocks:
        gap = _AFTER_DISPLAY.match(text, block.end)
        if block.display and gap is not None:
            yield block.end, gap.end()


def _merged(text: str, spans: list[tuple[int, int]], blocks: list[Block]) -> list[tuple[int, int]]:
    steps: list[tuple[int, int]] = []
    in_answer = False
    for start, end in spans:
        piece = text[start:end]
        if not steps:
            steps.append((start, end))
            continue
        previous = text[steps[-1][0]:steps[-1][1]]
        in_answer = in_answer or bool(ANSWER_HEADING.match(piece))
        if in_answer or is_lead_in(previous) or _continues(previous, piece, start, blocks):
            steps[-1] = (steps[-1][0], end)
        else:
            steps.append((start, end))
    return steps


def _continues(previous: str, piece: str, start: int, blocks: list[Block]) -> bool:
    """Whether `piece` is the rest of `previous`, not a step of its own."""
    if is_lone_equation(piece) or piece[:1].islower():
        return True
    opens_with_display = any(b.start == start and b.display for b in blocks)
    return opens_with_display and not ends_sentence(previous)


def is_lead_in(step: str) -> bool:
    """A step that announces what follows: it ends with ``:`` (bold or not), or is a heading."""
    step = _EMPHASIS_TAIL.sub("", step)
    if _GSM8K_FINAL.match(step) or ANSWER_HEADING.fullmatch(step):
        return False
    return step.endswith(":") or bool(_HEADING.fullmatch(step))


def ends_sentence(step: str) -> bool:
    return bool(_SENTENCE_END.search(_EMPHASIS_TAIL.sub("", step)))


def is_lone_equation(step: str) -> bool:
    """A step with no word outside its math: ``\\[ b^2 = 16 \\]``, ``6 x 6 = 36``.

    GSM8K's final ``#### 72`` is an answer line, not an equation.
    """
    if _GSM8K_FINAL.match(step.strip()):
        return False
    outside, last = [], 0
    for block in math_blocks(step):
        outside.append(step[last:block.start])
        last = block.end
    outside.append(step[last:])
    # Bare LaTeX commands (\\times, \\frac) are math written without delimiters, not words.
    return not _WORD.search(_COMMAND.sub("", strip_calculator_annotations("".join(outside))))
