"""Reading solution text: final-answer extraction, calculator annotations (steps: steps.splitting).

Plain string functions with no Django imports, shared by the importer, the workspace and
the export. Extraction follows the conventions real data uses, most specific first:

- PRM800K ends a solution with a line ``# Answer`` followed by the answer;
- GSM8K ends with ``#### 72``;
- MATH-style text says ``The answer is ...`` or ``Answer: ...`` / ``A: ...`` on its last line;
- otherwise the last ``\\boxed{...}`` (or ``\\fbox{...}``) anywhere, nested braces allowed.
"""
import re

_ANSWER_HEADING = re.compile(r"^[ \t]*#[ \t]*Answer[ \t]*:?[ \t]*$", re.MULTILINE | re.IGNORECASE)
_GSM8K_FINAL = re.compile(r"^[ \t]*####[ \t]*(.+?)[ \t]*$", re.MULTILINE)
_THE_ANSWER_IS = re.compile(r"the\s+(?:final\s+)?answer\s+is\s*:?\s*", re.IGNORECASE)
_ANSWER_PREFIX = re.compile(r"^\s*(?:final\s+answer|answer|a)\s*:\s*", re.IGNORECASE)
_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)\s*\{")
# GSM8K's calculator annotations, ``<<48/2=24>>``: in stored text, never shown.
CALCULATOR_ANNOTATION = re.compile(r"<<[^<>]*>>")


def extract_answer(text: str | None) -> str | None:
    """The final answer stated in `text`, or None when it states none.

    The result is cleaned for grading: a surrounding ``\\boxed{}``, ``$...$`` and a
    trailing full stop are removed; the LaTeX inside is kept as written.
    """
    if not text or not text.strip():
        return None
    for finder in (_after_answer_heading, _after_hashes, _after_the_answer_is, _after_answer_prefix, last_boxed):
        found = finder(text)
        if found is not None:
            cleaned = clean_answer(found)
            if cleaned:
                return cleaned
    return None


def _after_answer_heading(text: str) -> str | None:
    headings = list(_ANSWER_HEADING.finditer(text))
    if not headings:
        return None
    return text[headings[-1].end():].strip() or None


def _after_hashes(text: str) -> str | None:
    matches = list(_GSM8K_FINAL.finditer(text))
    return matches[-1].group(1) if matches else None


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _after_the_answer_is(text: str) -> str | None:
    # Only on the last line: earlier "the answer is" is usually an intermediate claim.
    last = _last_line(text)
    matches = list(_THE_ANSWER_IS.finditer(last))
    if not matches:
        return None
    return last[matches[-1].end():]


def _after_answer_prefix(text: str) -> str | None:
    match = _ANSWER_PREFIX.match(_last_line(text))
    return _last_line(text)[match.end():] if match else None


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` / ``\\fbox{...}``, braces balanced; None if none."""
    starts = [m.end() for m in _BOX_COMMAND.finditer(text)]
    for start in reversed(starts):
        content = _balanced(text, start)
        if content is not None:
            return content
    return None


def _balanced(text: str, start: int) -> str | None:
    """The text from `start` up to the brace closing the one just before it."""
    depth = 1
    i = start
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2  # an escaped brace \{ or \} does not count
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
        i += 1
    return None


def clean_answer(answer: str) -> str:
    """Strip the wrapping people put around answers, keeping the answer itself."""
    answer = answer.strip()
    boxed = last_boxed(answer)
    if boxed is not None:
        answer = boxed.strip()
    for _ in range(3):
        before = answer
        answer = answer.strip().rstrip(".").strip()
        if len(answer) >= 2 and answer.startswith("$") and answer.endswith("$"):
            answer = answer.strip("$").strip()
        if answer.startswith("\\(") and answer.endswith("\\)"):
            answer = answer[2:-2].strip()
        if answer == before:
            break
    return answer


def strip_calculator_annotations(text: str) -> str:
    """GSM8K text for display: ``48/2 = <<48/2=24>>24`` becomes ``48/2 = 24``.

    The annotations stay in stored text (they are part of the dataset); only display hides them.
    """
    return CALCULATOR_ANNOTATION.sub("", text)


def end_of_answer(text: str) -> str:
    """`text` up to the end of the first answer it states (``# Answer`` and the next non-blank
    line, or a GSM8K ``#### N`` line); all of it when it states none.

    A generated continuation often runs on past its answer (another problem, a second
    attempt); what follows the first stated answer is not part of the solution.
    """
    heading, hashes = _ANSWER_HEADING.search(text), _GSM8K_FINAL.search(text)
    ends = []
    if heading:
        after = re.search(r"\S[^\n]*", text[heading.end():])
        if after:
            ends.append(heading.end() + after.end())
    if hashes:
        ends.append(hashes.end())
    return text[: min(ends)] if ends else text
