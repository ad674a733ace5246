"""Answer normalization: the second opinion behind math-verify, in the PRM800K grader's spirit.

math-verify reads LaTeX as mathematics, which is right for expressions but wrong for the
decorations people put around an answer: ``5\\text{ cm}``, ``\\text{(C)}``, ``30^\\circ``,
``1,080 cookies``, ``10\\%``. And it reads a time of day ``4:30 p.m.`` as the ratio 4/30.
``normalize`` strips the decorations so that two answers a person would call equal become
the same string (or the same plain number); ``time_of_day`` reads clock times so they are
compared as times. Plain string functions, no Django and no sympy: cheap enough to run on
every answer math-verify does not accept.

Stripping units can make ``5 cm`` equal ``5 m``; PRM800K's grader accepts that risk too,
because a model that computed the right number in the wrong unit is rare and an answer
that states its unit is common.
"""
from __future__ import annotations

import re
from typing import NamedTuple

# Commands whose argument is the answer itself: \text{Monday}, \textbf{(A)}, \mbox{ cm}.
_TEXT_COMMAND = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|mbox|mathrm|mathbf|mathit|operatorname)\s*\{")
_SPACING = re.compile(r"\\[,;: ]|\\quad|\\qquad|~")
_NEGATIVE_SPACE = re.compile(r"\\!")  # 40,\!000: a thousands separator, not a space
_LEFT_RIGHT = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big)(?![a-zA-Z])\s*")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|°|\\degree(?![a-zA-Z])")
_PERCENT = re.compile(r"\\?%")
_DOLLAR = re.compile(r"\\\$|\$")
# Only a whole answer: inside (2,12) \cup (12,102) a comma separates numbers.
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
# A number (or a closing bracket) followed only by words: "18 dollars", "\frac34 of the pie",
# "5 cm^2", "12 sq. units". The words must be plain letters, so "2\pi" and "x + y" stay, and
# the first one two letters long at least, so "2 x" stays a product.
_TRAILING_WORDS = re.compile(r"(?<=[\d})\]])\s+[a-zA-Z]{2}[a-zA-Z. ]*(?:\^\{?\d\}?)?$")
_LEADING_VARIABLE = re.compile(r"^[a-zA-Z]\s*=\s*(?=[^=]+$)")
_CHOICE = re.compile(r"^\(([A-Ea-e])\)$")
_WORDS = re.compile(r"^[a-zA-Z][a-zA-Z' -]*$")
_NUMBER_WORDS = {
    word: str(i) for i, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
}
_CLOCK = re.compile(
    r"^(?P<h>\d{1,2}):(?P<m>\d{2})(?::\d{2})?\s*(?P<meridiem>[ap])?(?:\.?\s*m\.?)?$", re.IGNORECASE
)


def normalize(answer: str) -> str:
    """`answer` without its decorations, spaces removed, ready to compare as a string."""
    text = strip_text_commands(answer.strip())
    text = _SPACING.sub(" ", _NEGATIVE_SPACE.sub("", text)).replace("{,}", ",")
    text = _LEFT_RIGHT.sub("", text)
    text = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", text)
    text = text.replace("\\displaystyle", "")
    text = _DEGREES.sub("", text)
    text = _PERCENT.sub("", text)
    text = _DOLLAR.sub("", text)
    text = re.sub(r"\s+(?:and)\s+", ",", text)
    text = text.strip().rstrip(".").strip()
    text = _TRAILING_WORDS.sub("", text)
    text = _LEADING_VARIABLE.sub("", text)
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    text = re.sub(r"\s+", "", text) if not _WORDS.match(text) else " ".join(text.split())
    if match := _CHOICE.match(text):
        text = match[1]
    if _WORDS.match(text):
        text = text.lower()
        text = _NUMBER_WORDS.get(text, text)
    return text


def strip_text_commands(text: str) -> str:
    """``\\text{...}`` and its kin replaced by their content (nested braces kept balanced)."""
    while match := _TEXT_COMMAND.search(text):
        end = _closing_brace(text, match.end())
        if end is None:
            return text
        text = text[: match.start()] + text[match.end(): end] + text[end + 1:]
    return text


def _closing_brace(text: str, start: int) -> int | None:
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{" and text[i - 1] != "\\":
            depth += 1
        elif text[i] == "}" and text[i - 1] != "\\":
            depth -= 1
            if depth == 0:
                return i
    return None


def is_words(normalized: str) -> bool:
    """A normalized answer that is plain words ("monday", "no solution"), not mathematics."""
    return bool(_WORDS.match(normalized))


class Clock(NamedTuple):
    hour: int  # 0-23 when `meridiem`, else 0-12 as written
    minute: int
    meridiem: bool


def time_of_day(answer: str) -> Clock | None:
    """``4:30 p.m.``, ``\\text{4:30 PM}``, ``16:30`` as a clock time; None for anything else."""
    text = _SPACING.sub(" ", _NEGATIVE_SPACE.sub("", strip_text_commands(answer))).strip().rstrip(".").strip()
    text = _DOLLAR.sub("", text).strip()
    match = _CLOCK.match(text)
    if not match:
        return None
    hour, minute = int(match["h"]), int(match["m"])
    if minute > 59 or hour > 23:
        return None
    meridiem = match["meridiem"]
    if meridiem is None:
        return Clock(hour, minute, False)
    if hour > 12 or hour == 0:
        return None
    return Clock(hour % 12 + (12 if meridiem.lower() == "p" else 0), minute, True)


def same_time(a: Clock, b: Clock) -> bool:
    """Equal clock times; ``4:30`` (no a.m./p.m.) matches both 4:30 a.m. and 4:30 p.m."""
    if a.meridiem and b.meridiem:
        return (a.hour, a.minute) == (b.hour, b.minute)
    return (a.hour % 12, a.minute) == (b.hour % 12, b.minute)
