"""Where the formulas and the code of a solution text are: the one scanner of the step core.

The splitter (never cut inside a span) and the renderer (hand each formula whole to KaTeX)
both ask ``spans()``; nothing else looks for delimiters, so a step shows exactly the formulas
the whole text shows. The rules, read left to right, the first opener found winning:

- display math: ``$$ … $$``, ``\\[ … \\]`` and the math environments (``\\begin{align*} …
  \\end{align*}``, nested ones of the same name counted) on their own, blank lines allowed;
- inline math: ``\\( … \\)``, and ``$ … $`` by Pandoc's ``tex_math_dollars`` rule, which keeps
  prices apart: the opening ``$`` is followed by a non-space, and the first unescaped ``$``
  after it closes, provided it is not preceded by a space nor followed by a number (a digit,
  or a point and a digit: ``$.50``). If that first ``$`` cannot close, the opening one is a
  plain dollar: "$0.05 and $3" has no math, and "costs $0.05, so $x$" has one formula, ``x``.
  One exception: a formula that is only an escaped dollar, MATH's way of writing a price
  (``$\\$$1.20``), closes before a number too: the number is the amount it is the sign of.
  A formula may go over a line break but not a blank line. GSM8K's calculator annotations are
  read as the page shows them, hidden: in "= $<<9*2=18>>18" the dollar is followed by a digit;
- code: ``` fences (a language name after the opening fence is not code), MATH's ``[asy] …
  [/asy]`` pictures (blank lines and all) and inline `` `code` `` on one line;
- a delimiter after an odd run of backslashes is escaped: ``\\$`` is a literal dollar and
  ``\\\\[`` a LaTeX line break before a bracket;
- an opener with no valid closer (a truncated generation, a lone price) is plain text, and
  scanning goes on right after it.

Plain string functions, no Django.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from steps.answers import CALCULATOR_ANNOTATION

SpanKind = Literal["math", "code", "codeblock"]

# Environments that are math on their own, without $ or \[ around them (KaTeX renders each in
# display mode). ``aligned`` and ``cases`` need math mode, which display mode gives them.
MATH_ENVIRONMENTS = ("align", "align*", "aligned", "alignat", "alignat*", "gather", "gather*", "gathered",
                     "equation", "equation*", "cases", "split", "array", "matrix", "pmatrix", "bmatrix",
                     "vmatrix", "Bmatrix", "Vmatrix", "multline", "eqnarray", "eqnarray*")
_OPENER = re.compile(r"```|`|\$\$|\$|\\\[|\\\(|\[asy\]|\\begin\{(?P<environment>"
                     + "|".join(re.escape(name) for name in MATH_ENVIRONMENTS) + r")\}")
# opener: (closer, kind, display)
_PAIRS: dict[str, tuple[str, SpanKind, bool]] = {
    "$$": ("$$", "math", True),
    "\\[": ("\\]", "math", True),
    "\\(": ("\\)", "math", False),
    "```": ("```", "codeblock", True),
    "[asy]": ("[/asy]", "codeblock", True),
    "`": ("`", "code", False),
}
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_FENCE_LANGUAGE = re.compile(r"[\w+-]*")
_NUMBER = re.compile(r"\.?\d")
_DOLLAR_SIGN = re.compile(r"\\\$")  # the TeX of a literal dollar: a formula that is a currency sign


@dataclass(frozen=True)
class Span:
    """A formula or a piece of code: ``text[start:end]``, delimiters included, never to be cut."""

    kind: SpanKind  # "math", "code" (inline) or "codeblock" (a fence or an [asy] picture)
    start: int
    end: int
    body: str  # TeX without its delimiters (an environment keeps its \begin and \end), or the code
    display: bool  # a block of its own: $$ $$, \[ \], environments, code blocks


def spans(text: str) -> list[Span]:
    """The math and code spans of `text` by the module docstring's rules, in order, none inside another."""
    found: list[Span] = []
    position = 0
    while (opener := _OPENER.search(text, position)) is not None:
        if _escaped(text, opener.start()):
            position = opener.start() + 1  # only its first character is escaped: \$$x$ holds $x$
            continue
        span = _span_at(text, opener)
        position = opener.end() if span is None else span.end
        if span is not None:
            found.append(span)
    return found


def formulas(text: str) -> list[str]:
    """The TeX of every formula of `text`, in order."""
    return [span.body for span in spans(text) if span.kind == "math"]


def _escaped(text: str, index: int) -> bool:
    """Whether an odd run of backslashes stands just before `index`: ``\\$``, ``\\\\[``."""
    backslashes = 0
    while index - backslashes - 1 >= 0 and text[index - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _span_at(text: str, opener: re.Match[str]) -> Span | None:
    token, start, after = opener.group(0), opener.start(), opener.end()
    if token == "$":
        return _inline_dollar(text, start)
    if opener.group("environment"):
        return _environment(text, opener)
    closer, kind, display = _PAIRS[token]
    # TeX escapes its closers (\\] is a line break and a bracket); code takes backslashes literally.
    end = _find_unescaped(text, closer, after) if kind == "math" else _find(text, closer, after)
    if end is None or not _may_hold(token, text[after:end]):
        return None
    return Span(kind, start, end + len(closer), _body(token, text[after:end]), display)


def _find(text: str, closer: str, start: int) -> int | None:
    index = text.find(closer, start)
    return None if index < 0 else index


def _find_unescaped(text: str, closer: str, start: int) -> int | None:
    while (index := text.find(closer, start)) >= 0:
        if not _escaped(text, index):
            return index
        start = index + 1
    return None


def _may_hold(token: str, body: str) -> bool:
    """Whether the delimiters `token` opens may enclose `body`: no empty formula, inline spans
    on no blank line, inline code on one line."""
    if token in ("$$", "\\[", "\\("):
        return bool(body.strip()) and not (token == "\\(" and _BLANK_LINE.search(body))
    if token == "`":
        return bool(body) and "\n" not in body
    return True


def _body(token: str, body: str) -> str:
    if token == "```":
        first, newline, rest = body.partition("\n")
        if newline and _FENCE_LANGUAGE.fullmatch(first.strip()):
            body = rest
        return body.strip("\n")
    if token == "[asy]":
        return body.strip("\n")
    return body if token == "`" else body.strip()


def _inline_dollar(text: str, start: int) -> Span | None:
    """``$…$`` by Pandoc's rule (module docstring): only the first unescaped ``$`` may close it."""
    after = start + 1
    if after >= len(text) or text[after].isspace():
        return None
    end = _find_unescaped(text, "$", after)
    if end is None or text[end - 1].isspace():
        return None
    if _number_follows(text, end + 1) and not _DOLLAR_SIGN.fullmatch(text, after, end):
        return None
    if _BLANK_LINE.search(text, after, end):
        return None
    return Span("math", start, end + 1, text[after:end], False)


def _number_follows(text: str, index: int) -> bool:
    while (annotation := CALCULATOR_ANNOTATION.match(text, index)) is not None:
        index = annotation.end()
    return bool(_NUMBER.match(text, index))


def _environment(text: str, opener: re.Match[str]) -> Span | None:
    """``\\begin{name} … \\end{name}``, counting the environments of the same name inside it."""
    markers = re.compile(r"\\(begin|end)\{" + re.escape(opener.group("environment")) + r"\}")
    depth = 1
    for marker in markers.finditer(text, opener.end()):
        if _escaped(text, marker.start()):
            continue
        depth += 1 if marker.group(1) == "begin" else -1
        if depth == 0:
            return Span("math", opener.start(), marker.end(), text[opener.start():marker.end()], True)
    return None
