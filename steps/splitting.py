"""Splitting a solution text into the steps annotators rate: the one step splitter.

Plain string functions with no Django imports, used by the importer and the splitting
benchmark. A split has two stages:

1. **Cut** the text into pieces at the boundaries the mode allows, never inside a formula or
   code (``steps.scanning.spans``, which the renderer asks too, so a step shows the
   formulas the whole text shows): ``blank_line`` cuts at blank lines, ``line`` at every line
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
   - the PRM800K answer block (``# Answer`` and what follows) is one step of its own, as
     PRM800K's own steps have it ("So it is 5." then "# Answer\n\n5"): a completion in
     PRM800K's shape gets PRM800K's steps, in every mode. GSM8K's final ``#### N`` line stays
     a step of its own, as its importer always had it.

Steps are cut from the text, never rewritten: joining them keeps every non-whitespace
character. ``explicit`` is for imports whose lines give their steps as a list; it never
splits text (``split_steps`` refuses it).
"""
from __future__ import annotations

import bisect
import operator
import re
from collections.abc import Iterator
from typing import Literal

from steps import scanning
from steps.answers import _ANSWER_HEADING as ANSWER_HEADING
from steps.answers import strip_calculator_annotations
from steps.scanning import Span

SplitMode = Literal["auto", "blank_line", "line", "sentence", "explicit"]
SPLIT_MODES: tuple[SplitMode, ...] = ("auto", "blank_line", "line", "sentence", "explicit")
# The names of the first version (``--split blank|lines``), still accepted.
_ALIASES: dict[str, SplitMode] = {"blank": "blank_line", "lines": "line"}

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
_START = operator.attrgetter("start")


def check_mode(mode: str) -> SplitMode:
    """The split mode `mode` names (the old names ``blank`` and ``lines`` included), or ValueError."""
    mode = _ALIASES.get(mode, mode)
    if mode not in SPLIT_MODES:
        raise ValueError(f"unknown split mode {mode!r}; expected one of {', '.join(SPLIT_MODES)}")
    return mode


def split_steps(text: str, mode: str = "auto", *, merge: bool = True) -> list[str]:
    """The steps of a solution text, split as the module docstring says."""
    split_mode = check_mode(mode)
    if split_mode == "explicit":
        raise ValueError("split mode 'explicit' takes each line's steps as given; it never splits text")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    spans = scanning.spans(text)
    if split_mode == "auto":
        split_mode = "blank_line" if _cuts(text, spans, _BLANK_LINE) else "line"
    pieces = list(_pieces(text, spans, split_mode))
    if merge:
        pieces = _merged(text, pieces, spans)
    return [text[start:end] for start, end in pieces]


def _inside(spans: list[Span], index: int) -> bool:
    # The spans are in order and apart: only the last one to start before `index` can hold it.
    after = bisect.bisect_left(spans, index, key=_START)
    return after > 0 and index < spans[after - 1].end


def _cuts(text: str, spans: list[Span], separator: re.Pattern[str]) -> list[tuple[int, int]]:
    """The separator runs of `text` (start, end) that lie outside every span."""
    return [(m.start(), m.end()) for m in separator.finditer(text)
            if not _inside(spans, m.start()) and not _inside(spans, m.end() - 1)]


def _pieces(text: str, spans: list[Span], mode: SplitMode) -> Iterator[tuple[int, int]]:
    """The pieces of `text` between the cuts `mode` makes, whitespace trimmed, empty ones left out."""
    cuts = _cuts(text, spans, _BLANK_LINE if mode == "blank_line" else _LINE_BREAK)
    if mode == "sentence":
        cuts = sorted(set(cuts) | set(_sentence_cuts(text, spans)))
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


def _sentence_cuts(text: str, spans: list[Span]) -> Iterator[tuple[int, int]]:
    # A space after ".", "?" or "!" (maybe closing a quote or inline math) before a capital;
    # and the end of a display block before a capital: MATH writes "\\end{align*} Now, ...".
    for start, end in _cuts(text, spans, _SPACE):
        before, after = " " + text[max(0, start - 40):start], text[end:end + 2]
        line = text[text.rfind("\n", 0, start) + 1:start]
        if (_SENTENCE_END.search(before) and _SENTENCE_START.match(after) and not _ABBREVIATION.search(before)
                and not _LIST_NUMBER.fullmatch(line)):
            yield start, end
    for span in spans:
        gap = _AFTER_DISPLAY.match(text, span.end)
        if span.display and gap is not None:
            yield span.end, gap.end()


def _merged(text: str, pieces: list[tuple[int, int]], spans: list[Span]) -> list[tuple[int, int]]:
    steps: list[tuple[int, int]] = []
    in_answer = False
    for start, end in pieces:
        piece = text[start:end]
        opens_answer = not in_answer and bool(ANSWER_HEADING.match(piece))
        if not steps or opens_answer:
            # The answer block opens a step of its own; everything after it belongs to it.
            in_answer = in_answer or opens_answer
            steps.append((start, end))
            continue
        previous = text[steps[-1][0]:steps[-1][1]]
        if in_answer or is_lead_in(previous) or _continues(previous, piece, start, spans):
            steps[-1] = (steps[-1][0], end)
        else:
            steps.append((start, end))
    return steps


def _continues(previous: str, piece: str, start: int, spans: list[Span]) -> bool:
    """Whether `piece` is the rest of `previous`, not a step of its own."""
    if is_lone_equation(piece) or piece[:1].islower():
        return True
    opens_with_display = any(span.start == start and span.display for span in spans)
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
    for span in scanning.spans(step):
        outside.append(step[last:span.start])
        last = span.end
    outside.append(step[last:])
    # Bare LaTeX commands (\\times, \\frac) are math written without delimiters, not words.
    return not _WORD.search(_COMMAND.sub("", strip_calculator_annotations("".join(outside))))
