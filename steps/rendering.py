"""Model-written text as safe HTML: math kept whole for KaTeX, a small Markdown subset around it.

Real model output writes display math over several lines (``\\[`` on one line, the formula on
the next, ``\\]`` on a third) and bolds its lead-ins (``**Identify the outcomes:**``). Turning
line breaks into ``<br>`` before the math is found cuts every such formula in pieces that KaTeX
never sees whole, so the order here is: split the raw text into math, code and text segments
(``steps.scanning`` finds the formulas and the code, as it does for the step splitter,
so a step shows the formulas the whole text shows); escape everything; apply Markdown
(emphasis, lists, headings, line breaks) to the text only, with each math or code segment
standing in as an opaque placeholder; put the segments back as
``<span class="math" data-display="true|false">TeX</span>``, which ``static/js/math.js`` renders
with ``katex.render`` (``trust: false``). No HTML from the data survives: it is all escaped
before any tag is written, and every tag written comes from this module.

Django-free: the template filters in ``annotate/templatetags/workspace.py`` mark the result safe.
"""
import functools
import html
import re
from dataclasses import dataclass

from steps import scanning

# Placeholders in private-use characters: input has them removed, so they cannot be forged.
_PH_OPEN, _PH_CLOSE = "\ue000", "\ue001"
_PLACEHOLDER = re.compile(_PH_OPEN + r"(\d+)" + _PH_CLOSE)


@dataclass(frozen=True)
class Segment:
    kind: str  # "text", or a scanning.Span's kind: "math", "code" (inline) or "codeblock"
    body: str  # text as written, TeX without its delimiters, or code
    display: bool = False
    # Where it stands in clean(text), delimiters included.
    start: int = 0
    end: int = 0

    @property
    def is_block(self) -> bool:
        return self.kind == "codeblock"


def clean(text: str | None) -> str:
    """Newlines normalised, NULs and the placeholder characters removed."""
    text = (text or "").replace("\r\n", "\n").replace("\r", "\n")
    return re.sub("[\x00\ue000\ue001]", "", text)


def segments(text: str) -> list[Segment]:
    """The text cut into math, code and text segments: ``scanning.spans`` and the text between."""
    text = clean(text)
    found: list[Segment] = []
    plain_from = 0
    for span in scanning.spans(text):
        if span.start > plain_from:
            found.append(Segment("text", text[plain_from:span.start], start=plain_from, end=span.start))
        found.append(Segment(span.kind, span.body, span.display, start=span.start, end=span.end))
        plain_from = span.end
    if plain_from < len(text):
        found.append(Segment("text", text[plain_from:], start=plain_from, end=len(text)))
    return found


# The labeling page renders the same few step texts on every click: a pure function of the
# text, so recent results are kept (texts up to _MEMO_CHARS, _MEMO_ENTRIES of them per process).
_MEMO_CHARS = 4_000
_MEMO_ENTRIES = 2048  # a few MB for typical steps, at most ~25 MB per process


def render(text: str | None) -> str:
    """The text as block HTML: paragraphs, lists, emphasis, code and math spans."""
    text = text or ""
    return _render_memo(text) if len(text) <= _MEMO_CHARS else _render(text)


def _render(text: str) -> str:
    parts = segments(text)
    return _fill(_blocks(_escaped(_with_placeholders(parts)).split("\n"), parts), parts)


_render_memo = functools.lru_cache(maxsize=_MEMO_ENTRIES)(_render)


def render_inline(text: str | None) -> str:
    """The text as inline HTML (no paragraphs or lists; line breaks become spaces)."""
    return _inline_html(segments(text or ""))


def preview(text: str | None, limit: int = 80) -> str:
    """At most about `limit` characters as inline HTML, cut between segments or between words
    of a text segment, never inside a formula. A formula that starts the text is kept whole."""
    kept: list[Segment] = []
    used = 0
    for segment in segments(text or ""):
        body = re.sub(r"\s+", " ", segment.body) if segment.kind == "text" else segment.body
        if used + len(body) <= limit:
            kept.append(Segment(segment.kind, body))
            used += len(body)
            continue
        if segment.kind == "text":
            cut = body[:limit - used].rsplit(" ", 1)[0] if limit > used else ""
            kept.append(Segment("text", (cut.rstrip(" ,.;:") or " ") + "…"))
        else:
            kept += [segment] if not kept else []
            kept.append(Segment("text", " …"))
        break
    return _inline_html(kept)


def _inline_html(parts: list[Segment]) -> str:
    parts = [Segment("code", p.body) if p.is_block else p for p in parts]
    return _fill(_inline(_escaped(" ".join(_with_placeholders(parts).split()))), parts, inline=True)


def _escaped(text: str) -> str:
    """Text outside math and code, escaped; ``\\$`` (TeX's literal dollar) is a plain ``$`` there."""
    return html.escape(text).replace("\\$", "$")


def _with_placeholders(parts: list[Segment]) -> str:
    # Block segments sit on a line of their own so that _blocks puts them outside paragraphs.
    return "".join(p.body if p.kind == "text" else f"\n{_PH_OPEN}{i}{_PH_CLOSE}\n" if p.is_block
                   else f"{_PH_OPEN}{i}{_PH_CLOSE}" for i, p in enumerate(parts))


def _fill(body: str, parts: list[Segment], *, inline: bool = False) -> str:
    def one(match: re.Match[str]) -> str:
        part = parts[int(match.group(1))]
        code = html.escape(part.body)
        if part.kind == "math":
            display = "true" if part.display and not inline else "false"
            return f'<span class="math" data-display="{display}">{code}</span>'
        return _code_block(code, part.body.count("\n") + 1) if part.is_block else f"<code>{code}</code>"

    return _PLACEHOLDER.sub(one, body)


# A code block longer than this opens on its first lines with a control that shows the rest, so
# an [asy] picture's forty lines never fill the screen (static/css/stepwise.css bounds it).
COLLAPSED_LINES = 6


def _code_block(code: str, lines: int) -> str:
    block = f"<pre><code>{code}</code></pre>"
    if lines <= COLLAPSED_LINES:
        return block
    # <details> is the control: it works without JavaScript, and Enter on its summary stays native.
    return (f'<div class="codeblock collapsed">{block}<details><summary><span class="more">Show all {lines} lines'
            '</span><span class="less">Show less</span></summary></details></div>')


_STRONG = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)", re.S)
_EM = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])", re.S)


def _inline(escaped: str) -> str:
    """Emphasis on escaped text. ``2 * 3 * 4`` and ``5*3*2`` stay as written."""
    escaped = _STRONG.sub(lambda m: f"<strong>{m.group(1) or m.group(2)}</strong>", escaped)
    return _EM.sub(r"<em>\1</em>", escaped)


_LIST_ITEM = re.compile(r"( *)([-*+]|\d{1,9}[.)])[ \t]+(.*)")
_HEADING = re.compile(r" {0,3}#{1,6}[ \t]+(.*?)[ \t#]*")
_RULE = re.compile(r" {0,3}([-*_])( *\1){2,} *")
_DISPLAY_LINE = re.compile(r"\s*" + _PH_OPEN + r"(\d+)" + _PH_CLOSE + r"\s*")


def _blocks(lines: list[str], parts: list[Segment]) -> str:
    """Paragraphs, (nested) lists, headings and rules of escaped lines, in the spirit of Markdown.

    A list item goes on over indented lines, and over unindented ones until a blank line
    (Markdown's lazy continuation); an ordered list keeps its first number, since a step cut
    from a longer solution often starts at "2.". Inside a paragraph a line break is a ``<br>``,
    except around a display formula, which is a block of its own already.
    """
    out = _Blocks(parts)
    for line in lines:
        out.line(line.expandtabs(4))
    return out.finish()


class _Blocks:
    def __init__(self, parts: list[Segment]) -> None:
        self.parts = parts
        self.html: list[str] = []
        self.lists: list[tuple[int, str]] = []  # open lists: (indent of the marker, tag)
        self.paragraph: list[str] = []
        self.item_has_text = False
        self.after_blank = False

    def line(self, line: str) -> None:
        indent = len(line) - len(line.lstrip(" "))
        if not line.strip():
            self.flush()
            self.after_blank = True
            return
        if item := _LIST_ITEM.fullmatch(line):
            self.item(indent, item.group(2), item.group(3))
        elif self._is_block_line(line):
            self.flush()  # a code block stays inside the list item it follows
            self.html.append(line.strip())
        elif (heading := _HEADING.fullmatch(line)) or _RULE.fullmatch(line):
            self.close_lists(0)
            self.flush()
            self.html.append(f'<p class="heading"><strong>{_inline(heading.group(1))}</strong></p>'
                             if heading else "<hr>")
        elif self.lists and (indent > 0 or not self.after_blank):
            if indent > 0 and self.lists[-1][0] >= indent:
                self.flush()
                self.close_lists(indent)
            elif self.after_blank:
                self.flush()
            self.paragraph.append(line.strip())
        else:
            self.close_lists(0)
            self.paragraph.append(line.strip())
        self.after_blank = False

    def _is_block_line(self, line: str) -> bool:
        match = _DISPLAY_LINE.fullmatch(line)
        return match is not None and self.parts[int(match.group(1))].is_block

    def item(self, indent: int, marker: str, text: str) -> None:
        self.flush()
        tag = "ul" if marker in "-*+" else "ol"
        self.close_lists(indent + 1)
        if self.lists and self.lists[-1][0] == indent and self.lists[-1][1] != tag:
            self.close_lists(indent)
        if self.lists and self.lists[-1][0] == indent:
            self.html.append("</li><li>")
        else:
            start = int(marker[:-1]) if tag == "ol" else 1
            self.html.append(f'<ol start="{start}"><li>' if start != 1 else f"<{tag}><li>")
            self.lists.append((indent, tag))
        self.item_has_text = False
        self.paragraph = [text]

    def close_lists(self, indent: int) -> None:
        """Close the open lists whose markers are indented `indent` or more."""
        while self.lists and self.lists[-1][0] >= indent:
            self.flush()
            self.html.append(f"</li></{self.lists.pop()[1]}>")
            self.item_has_text = True  # the enclosing item, if any, holds that list now

    def flush(self) -> None:
        if not self.paragraph:
            return
        text = _inline(self._join(self.paragraph))
        in_item = bool(self.lists)
        self.html.append(text if in_item and not self.item_has_text else f"<p>{text}</p>")
        self.item_has_text = in_item
        self.paragraph = []

    def _join(self, lines: list[str]) -> str:
        joined = lines[0]
        for before, line in zip(lines, lines[1:]):
            display = self._is_display(before) or self._is_display(line)
            joined += ("\n" if display else "<br>\n") + line
        return joined

    def _is_display(self, line: str) -> bool:
        match = _DISPLAY_LINE.fullmatch(line)
        return match is not None and self.parts[int(match.group(1))].display

    def finish(self) -> str:
        self.flush()
        self.close_lists(0)
        return "\n".join(self.html)


def render_answer(answer: str | None) -> str:
    """A final answer (``\\frac{1}{9}``, ``14``, ``Monday``) as inline HTML: TeX unless it reads
    as words ("4:30 p.m." is not the product of p and m)."""
    answer = clean(answer).strip()
    if "$" in answer or "\\(" in answer or (re.search(r"[A-Za-z]{2,}|[A-Za-z]\.", answer) and "\\" not in answer):
        return render_inline(answer)
    return _fill(f"{_PH_OPEN}0{_PH_CLOSE}", [Segment("math", answer)], inline=True) if answer else ""
