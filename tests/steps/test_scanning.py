"""The one scanner of formulas and code: what it finds, and that no split of a text changes it.

The splitter and the renderer both read ``scanning.spans``; the property that matters to an
annotator is that the steps of a text, taken together, show exactly the formulas the whole
text shows, in every split mode, so nobody rates half a formula.
"""
import json
import re

import pytest

from steps import rendering, scanning
from steps.splitting import SPLIT_MODES, split_steps
from tests.conftest import TEST_DATA

SPLITS = [(mode, merge) for mode in SPLIT_MODES if mode != "explicit" for merge in (True, False)]
DELIMITER = re.compile(r"```|`|\$\$|\$|\\[\[\]()]|\[/?asy\]|\\(?:begin|end)\{(?:"
                       + "|".join(re.escape(name) for name in scanning.MATH_ENVIRONMENTS) + r")\}")
MATH_SPAN = re.compile(r'<span class="math" data-display="(true|false)">(.*?)</span>', re.S)

# text: the formulas a reader sees in it
HAND_CASES = {
    "a formula across a line break": (
        "So $x =\n\\frac{1}{2}$ and that is it.\nNext, we check it.", ["x =\n\\frac{1}{2}"]),
    "nested environments": (
        "We solve\n\\begin{align*}\nA &= \\begin{pmatrix} 1 & 2 \\\\\n3 & 4 \\end{pmatrix} \\\\[2pt]\n"
        "B &= \\begin{array}{c} \\begin{array}{c} 1 \\end{array} \\end{array}\n\\end{align*}\nDone. Then more.",
        ["\\begin{align*}\nA &= \\begin{pmatrix} 1 & 2 \\\\\n3 & 4 \\end{pmatrix} \\\\[2pt]\n"
         "B &= \\begin{array}{c} \\begin{array}{c} 1 \\end{array} \\end{array}\n\\end{align*}"]),
    "an [asy] picture with a blank line inside, its labels code": (
        "Look:\n[asy]\ndraw((0,0)--(1,1));\n\nlabel(\"$A$\", (0,0));\n[/asy]\nSo $AB = \\sqrt{2}$.",
        ["AB = \\sqrt{2}"]),
    "escaped dollars": (
        "It costs \\$5. So $x = \\$5$ here.\nThen \\\\$y$ after a line break, and \\$$z$.", ["x = \\$5", "y", "z"]),
    "$$ on lines of their own, a blank line inside": (
        "We have\n$$\nx + 1\n\n= 2\n$$\nso x is 1. Then y.", ["x + 1\n\n= 2"]),
    "a price and a later dollar that cannot close it": (
        "Each pen costs $0.05. So for $n$ pens.\nWe pay $0.05n$ in all.", ["n", "0.05n"]),
    "prices only": ("Pens cost $0.05 and $3 each.\nThat is $3.05 in all.", []),
    "a dollar with no valid closer": ("It costs 5$.\nSo $x is cheap", []),
    "GSM8K prices with calculator annotations": (
        "He earns 9*2 = $<<9*2=18>>18 a day.\nHe spends 2*.25=$<<2*.25=.50>>.50 an hour.", []),
    "inline code and a code fence with a blank line": (
        "Run `x = $5` here.\n```python\nprint('$5 and $10')\n\nprint(2)\n```\nThen $y$.", ["y"]),
    "\\( \\) and \\[ \\], and \\\\[ as a line break": (
        "where \\(r\n= 2\\) is the radius. So \\[ a \\\\[2pt] b \\] holds.", ["r\n= 2", "a \\\\[2pt] b"]),
    "an unclosed display formula from a truncated generation": ("We get\n\\[\nx = 1 + $y$", ["y"]),
}


def _jsonl(relative: str) -> list[dict]:
    with open(TEST_DATA / relative) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _model_responses() -> list[str]:
    return [text for row in _jsonl("model-responses/math_qwen25_cot_20x8.jsonl") for text in row["response"]]


def _model_response_problems() -> list[str]:
    return [text for row in _jsonl("model-responses/math_qwen25_cot_20x8.jsonl")
            for text in (row["question"], row["solution"])]


CORPORA = {
    "qwen25_math_responses": _model_responses,
    "qwen25_math_problems_and_reference_solutions": _model_response_problems,
    "math500_reference_solutions": lambda: [row["answer"] for row in _jsonl("math500/test.jsonl")],
    "math500_problems": lambda: [row["question"] for row in _jsonl("math500/test.jsonl")],
    "gsm8k_test_answers": lambda: [row["answer"] for row in _jsonl("gsm8k/test.jsonl")],
}


def steps_at(text: str, mode: str, merge: bool) -> list[tuple[int, str]]:
    """The steps of `text` with where each starts: steps are cut from it in order, never rewritten."""
    found, position = [], 0
    for step in split_steps(text, mode, merge=merge):
        start = text.index(step, position)
        found.append((start, step))
        position = start + len(step)
    return found


def unpaired_delimiters(text: str) -> list[tuple[int, str]]:
    """The delimiters of `text` outside every span, where they stand: what the scanner left plain."""
    spans = scanning.spans(text)
    return [(m.start(), m.group()) for m in DELIMITER.finditer(text)
            if not _escaped(text, m.start()) and not any(s.start <= m.start() < s.end for s in spans)]


def _escaped(text: str, index: int) -> bool:
    return (len(text[:index]) - len(text[:index].rstrip("\\"))) % 2 == 1


def assert_steps_keep_the_formulas(text: str, mode: str, merge: bool) -> None:
    steps = [step for _, step in steps_at(text, mode, merge)]
    assert [f for step in steps for f in scanning.formulas(step)] == scanning.formulas(text), (mode, text)


def assert_no_step_unbalances_a_delimiter(text: str, mode: str, merge: bool) -> None:
    """Every delimiter a step leaves unpaired, the whole text leaves unpaired too, and the other way round."""
    in_steps = [(start + at, delimiter) for start, step in steps_at(text, mode, merge)
                for at, delimiter in unpaired_delimiters(step)]
    assert in_steps == unpaired_delimiters(text), (mode, text)


def test_a_formula_across_a_line_break_is_one_formula_and_never_two_steps():
    text = "So $x =\n\\frac{1}{2}$ and that is it."
    assert scanning.formulas(text) == ["x =\n\\frac{1}{2}"]
    for mode, merge in SPLITS:
        assert split_steps(text, mode, merge=merge) == [text]
    formula = '<span class="math" data-display="false">x =\n\\frac{1}{2}</span>'
    assert rendering.render(text) == f"<p>So {formula} and that is it.</p>"


@pytest.mark.parametrize("case", HAND_CASES)
def test_the_scanner_finds_the_formulas_a_reader_sees(case):
    text, formulas = HAND_CASES[case]
    assert scanning.formulas(text) == formulas
    assert [s.body for s in rendering.segments(text) if s.kind == "math"] == formulas


@pytest.mark.parametrize("case", HAND_CASES)
@pytest.mark.parametrize("mode,merge", SPLITS)
def test_no_split_of_a_hand_case_cuts_a_formula_or_code(case, mode, merge):
    text, _ = HAND_CASES[case]
    assert_steps_keep_the_formulas(text, mode, merge)
    assert_no_step_unbalances_a_delimiter(text, mode, merge)
    for span in scanning.spans(text):
        assert any(text[span.start:span.end] in step for _, step in steps_at(text, mode, merge))


def test_a_dollar_opens_only_before_a_non_space_and_closes_only_after_one_and_before_no_number():
    assert scanning.formulas("$0.05 and $3") == []
    assert scanning.formulas("costs $5 or $x$") == ["x"]
    assert scanning.formulas("$ x$ and $x $ and $x$5 and $x$.5") == []
    assert scanning.formulas("$x$, $x$.") == ["x", "x"]
    assert scanning.formulas("$a\n\nb$") == []  # never over a blank line


def test_an_escaped_dollar_as_inline_math_is_the_sign_of_the_price_after_it():
    """MATH writes a price "$\\$$1.20": a formula that is only a dollar sign, then the amount."""
    assert scanning.formulas("Bob has $\\$$1.20 in nickels and $\\$$.50 more.") == ["\\$", "\\$"]
    assert scanning.formulas("$\\$1.20 + x$") == ["\\$1.20 + x"]
    assert scanning.formulas("$x\\$$5 and $\\$ $5") == []  # only a bare sign closes before a number


def test_each_span_says_what_it_is_and_where_it_stands():
    text = "So $x$, $$y$$, \\(z\\), `code`,\n```py\nrun()\n```\n[asy]\ndot((0,0));\n[/asy]"
    assert [(s.kind, s.body, s.display, text[s.start:s.end]) for s in scanning.spans(text)] == [
        ("math", "x", False, "$x$"),
        ("math", "y", True, "$$y$$"),
        ("math", "z", False, "\\(z\\)"),
        ("code", "code", False, "`code`"),
        ("codeblock", "run()", True, "```py\nrun()\n```"),
        ("codeblock", "dot((0,0));", True, "[asy]\ndot((0,0));\n[/asy]"),
    ]


def test_an_asy_picture_renders_as_code_with_its_labels_as_written():
    rendered = rendering.render("[asy]\nlabel(\"$A$\", (0,0));\n\ndot((0,0));\n[/asy]")
    assert rendered == "<pre><code>label(&quot;$A$&quot;, (0,0));\n\ndot((0,0));</code></pre>"


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("mode,merge", SPLITS)
def test_on_real_text_the_steps_together_have_the_formulas_of_the_whole_text(corpus, mode, merge):
    for text in CORPORA[corpus]():
        assert_steps_keep_the_formulas(text, mode, merge)


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("mode,merge", SPLITS)
def test_on_real_text_no_step_has_an_unbalanced_delimiter(corpus, mode, merge):
    for text in CORPORA[corpus]():
        assert_no_step_unbalances_a_delimiter(text, mode, merge)


def test_real_model_responses_leave_no_math_delimiter_unpaired_but_prices():
    for text in _model_responses():
        assert [d for _, d in unpaired_delimiters(text) if d != "$"] == [], text


@pytest.mark.parametrize("mode", [mode for mode, merge in SPLITS if merge])
def test_the_steps_of_a_real_response_render_the_formulas_the_whole_response_renders(mode):
    for text in _model_responses():
        whole = MATH_SPAN.findall(rendering.render(text))
        assert [f for step in split_steps(text, mode) for f in MATH_SPAN.findall(rendering.render(step))] == whole


def test_a_long_asy_picture_renders_collapsed_with_a_control_that_shows_every_line():
    picture = "\n".join(f"dot(({n},0));" for n in range(rendering.COLLAPSED_LINES + 1))
    rendered = rendering.render(f"See:\n[asy]\n{picture}\n[/asy]")
    assert f"<pre><code>{picture}</code></pre>" in rendered
    assert rendered.count('class="codeblock collapsed"') == 1
    assert f"<summary><span class=\"more\">Show all {rendering.COLLAPSED_LINES + 1} lines</span>" in rendered
