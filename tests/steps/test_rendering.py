"""Model-written text as HTML: every formula whole for KaTeX, Markdown around it, nothing unescaped.

Most cases are real: 160 Qwen2.5-Math responses (multi-line ``\\[ … \\]``, ``\\( … \\)``, bold
lead-ins, numbered lists), MATH-500 statements and GSM8K's prices.
"""
import html
import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from annotate.labeling import actions as labeling
from annotate.labeling import queueing
from steps import rendering
from steps.answers import strip_calculator_annotations
from steps.splitting import split_steps
from tests.conftest import TEST_DATA
from tests.factories import ProblemFactory, SolutionFactory

RESPONSES_FILE = TEST_DATA / "model-responses" / "math_qwen25_cot_20x8.jsonl"
MATH_SPAN = re.compile(r'<span class="math" data-display="(true|false)">(.*?)</span>', re.S)


def real_rows() -> list[dict]:
    return [json.loads(line) for line in RESPONSES_FILE.open()]


def real_responses() -> list[str]:
    return [response for row in real_rows() for response in row["response"]]


def outside_math(rendered: str) -> str:
    return MATH_SPAN.sub("", rendered)


def test_every_display_block_of_real_responses_becomes_one_math_segment():
    blocks = 0
    for response in real_responses():
        expected = [body.strip() for body in re.findall(r"\\\[(.*?)\\\]", response, re.S)]
        found = [s.body for s in rendering.segments(response) if s.kind == "math" and s.display]
        assert found == expected
        blocks += len(expected)
    assert blocks > 300  # The file really is multi-line display math.


def test_no_line_break_is_written_inside_math_and_no_delimiter_is_left_outside():
    for response in real_responses():
        rendered = rendering.render(response)
        spans = MATH_SPAN.findall(rendered)
        assert spans and all("<" not in tex for _, tex in spans)  # no <br>, no tag at all inside math
        assert not re.search(r"\\\[|\\\]|\\\(|\\\)", outside_math(rendered))


def test_math_is_kept_verbatim_and_escaped_only():
    response = real_responses()[0]
    tex = [html.unescape(tex) for _, tex in MATH_SPAN.findall(rendering.render(response))]
    assert tex == [s.body for s in rendering.segments(response) if s.kind == "math"]


def test_each_step_of_a_real_response_renders_on_its_own():
    for response in real_responses()[:40]:
        for step in split_steps(response):
            assert not re.search(r"\\\[|\\\]", outside_math(rendering.render(step)))


def test_bold_lead_ins_of_real_responses_become_strong():
    bold = [r for r in real_responses() if "**" in r]
    assert len(bold) > 20
    for response in bold:
        rendered = rendering.render(response)
        assert "<strong>" in rendered and "**" not in outside_math(rendered)


def test_script_and_markup_in_text_and_in_math_are_escaped():
    rendered = rendering.render('<script>alert(1)</script> and $x<y$ and \\(a"><img src=x onerror=alert(1)>\\)')
    assert "<script>" not in rendered and "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered
    assert "<img" not in rendered and "&lt;img" in rendered
    assert '<span class="math" data-display="false">x&lt;y</span>' in rendered
    # The placeholder characters cannot be smuggled in to pull in another segment.
    assert "\ue000" not in rendering.render("\ue0000\ue001 $x$")


def test_markdown_emphasis_lists_and_code():
    text = "**Step 1:** use *this* value, not 2 * 3 * 4 or 5*3*2.\n- one\n- two `x*y`\n  - nested"
    rendered = rendering.render(text)
    assert "<strong>Step 1:</strong>" in rendered and "<em>this</em>" in rendered
    assert "2 * 3 * 4 or 5*3*2" in rendered
    assert "<ul><li>" in rendered and rendered.count("<ul>") == 2 and "<code>x*y</code>" in rendered


def test_a_step_cut_from_a_numbered_list_keeps_its_number():
    rendered = rendering.render("2. **Identify the outcomes:**\n   We list them:\n   \\[\n   x = 1\n   \\]")
    assert rendered.startswith('<ol start="2"><li>')
    assert '<span class="math" data-display="true">x = 1</span>' in rendered


def test_line_breaks_only_outside_math_and_none_around_a_display_formula():
    rendered = rendering.render("First line\nsecond line:\n\\[\na\n+ b\n\\]\nthen more.")
    assert "First line<br>" in rendered
    assert '<span class="math" data-display="true">a\n+ b</span>' in rendered
    assert "line:<br>" not in rendered and "</span><br>" not in rendered


@pytest.mark.parametrize("text,tex,display", [
    ("Sum: $$\n1 + 2\n+ 3\n$$ done", "1 + 2\n+ 3", True),
    ("So \\(x\n= 2\\) here", "x\n= 2", False),
    ("with $\\frac{a}{b}\n+ c$ here", "\\frac{a}{b}\n+ c", False),
    ("so $x = \\boxed{83}$.", "x = \\boxed{83}", False),
    ("costs $\\$1500$ now", "\\$1500", False),
    ("\\begin{align*}\nx &= 1 \\\\\ny &= 2\n\\end{align*}",
     "\\begin{align*}\nx &= 1 \\\\\ny &= 2\n\\end{align*}", True),
    ("\\[\nf(x) = \\begin{cases} 1 & x > 0 \\\\ 0 & \\text{else} \\end{cases}\n\\]",
     "f(x) = \\begin{cases} 1 & x > 0 \\\\ 0 & \\text{else} \\end{cases}", True),
    ("\\[ \\begin{aligned} a &= b \\\\ &= c \\end{aligned} \\]",
     "\\begin{aligned} a &= b \\\\ &= c \\end{aligned}", True),
])
def test_every_delimiter_real_models_write_is_one_formula(text, tex, display):
    (math,) = [s for s in rendering.segments(text) if s.kind == "math"]
    assert (math.body, math.display) == (tex, display)


@pytest.mark.parametrize("text", [
    "She sells eggs for $2 each and milk for $3 a bottle.",
    "He has $5 and $10, so $15 in all.",
    "A price \\$5 and an unclosed \\[ x + 1",
    "`$x$` is code, and so is\n```python\nprint('$5 and $10')\n```",
])
def test_prices_escaped_dollars_code_and_unclosed_delimiters_are_not_math(text):
    assert [s for s in rendering.segments(text) if s.kind == "math"] == []


@pytest.mark.parametrize("text,shown", [
    ("so $ x = \\boxed{83}$.", "<p>so $ x = \\boxed{83}$.</p>"),
    ("costs $x$1500 now", "<p>costs $x$1500 now</p>"),
])
def test_dollars_that_break_pandocs_rule_are_plain_dollars_even_around_tex(text, shown):
    """A space just inside a dollar, or a digit right after the closing one, makes both plain
    dollars, as for prices; the splitter reads the same rule. MATH-500 writes the first twice."""
    assert [s for s in rendering.segments(text) if s.kind == "math"] == []
    assert rendering.render(text) == shown


def test_an_escaped_dollar_written_as_math_is_the_sign_before_the_amount():
    """MATH-500 writes "$\\$$1500" twice: KaTeX draws the sign, and the page reads "$1500"."""
    assert rendering.render("costs $\\$$1500 now") == (
        '<p>costs <span class="math" data-display="false">\\$</span>1500 now</p>')


def test_gsm8k_prices_never_swallow_words_into_math():
    for line in (TEST_DATA / "gsm8k" / "test.jsonl").open():
        record = json.loads(line)
        for text in (record["question"], record["answer"]):
            for segment in rendering.segments(strip_calculator_annotations(text)):
                assert segment.kind == "text" or not re.search(r"[a-z]{2,}", segment.body), text


def test_preview_cuts_between_formulas_never_inside_one():
    statement = "Simplify $8 \\frac{1}{2} \\cdot \\frac{3}{4}$ and then $\\sqrt{2}$ and write the answer in words."
    formula = '<span class="math" data-display="false">8 \\frac{1}{2} \\cdot \\frac{3}{4}</span>'
    assert rendering.preview(statement, 40) == f"Simplify {formula} …"
    assert rendering.preview(statement, 20) == "Simplify …"
    assert rendering.preview(statement[9:], 10) == f"{formula} …"  # a formula first is kept whole
    for row in real_rows():
        cut = rendering.preview(row["question"], 80)
        assert cut.count("<span") == cut.count("</span>")
        assert all(html.unescape(tex) in row["question"] for _, tex in MATH_SPAN.findall(cut))


def test_answers_are_math_unless_they_are_words():
    assert rendering.render_answer("\\frac{1}{9}") == '<span class="math" data-display="false">\\frac{1}{9}</span>'
    assert rendering.render_answer("14").startswith('<span class="math"')
    assert rendering.render_answer("4:30 p.m.") == "4:30 p.m."
    assert rendering.render_answer("<b>Monday</b>") == "&lt;b&gt;Monday&lt;/b&gt;"


@pytest.mark.django_db
def test_labeling_and_review_pages_keep_multi_line_display_math_whole(annotator, reviewer):
    """The bug: |linebreaksbr put <br> between \\[ and \\], so KaTeX never saw the formula."""
    row = real_rows()[0]
    problem = ProblemFactory(statement=row["question"], ground_truth_answer=row["answer"])
    SolutionFactory(problem=problem, steps=split_steps(row["response"][0]))
    queueing.ensure_default_queue()
    task = queueing.claim_next(annotator=annotator)
    client = Client()
    client.force_login(annotator)
    label_page = client.get(reverse("annotate:label-task", args=[task.pk])).content.decode()
    labeling.rate(annotation=task, index=0, rating=-1)
    labeling.submit(annotation=task)
    client.force_login(reviewer)
    review_page = client.get(reverse("annotate:review-detail", args=[task.pk])).content.decode()
    for page in (label_page, review_page):
        assert '<span class="math" data-display="true">6 \\times 6 = 36</span>' in page
        assert "<strong>Identify all possible outcomes" in page
        assert '<span class="math" data-display="false">\\dfrac{1}{9}</span>' in page  # the boxed answer


@pytest.mark.django_db
def test_review_list_and_queue_cells_never_cut_a_formula(reviewer, admin_user, annotator):
    statement = "Express $8 \\frac{1}{2}$ plus $\\frac{3}{4}$ as " + "a mixed number, in lowest terms " * 4
    SolutionFactory(problem=ProblemFactory(statement=statement), steps=["So $x = 1$."])
    queueing.ensure_default_queue()
    expected = '<span class="math" data-display="false">8 \\frac{1}{2}</span>'
    client = Client()
    client.force_login(admin_user)
    queue_page = client.get(reverse("scoring:queue")).content.decode()
    assert expected in queue_page and "katex.min.js" in queue_page
    task = queueing.claim_next(annotator=annotator)
    labeling.rate(annotation=task, index=0, rating=1)
    labeling.submit(annotation=task)
    client.force_login(reviewer)
    review_list = client.get(reverse("annotate:review-list")).content.decode()
    assert expected in review_list and "katex.min.js" in review_list


def test_segments_say_where_each_formula_stands_for_a_splitter():
    text = "Lead-in:\n\\[\nx = 1\n\\]\nand $y$."
    parts = rendering.segments(text)
    assert "".join(text[p.start:p.end] for p in parts) == text
    assert [text[p.start:p.end] for p in parts if p.kind == "math"] == ["\\[\nx = 1\n\\]", "$y$"]
    for response in real_responses():
        assert "".join(response[p.start:p.end] for p in rendering.segments(response)) == response
