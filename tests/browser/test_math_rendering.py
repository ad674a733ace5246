"""Real model output in Chromium: multi-line display math rendered by KaTeX, no raw delimiters left."""
import re

import pytest

from annotate.labeling import actions as labeling
from annotate.labeling import queueing
from steps import rendering
from steps.splitting import split_steps
from tests.browser.test_labeling_browser import log_in, start_labeling
from tests.factories import ProblemFactory, SolutionFactory, user_with_role
from tests.steps.test_rendering import real_responses, real_rows

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
RAW_DELIMITERS = re.compile(r"\\\[|\\\]|\\\(|\\\)|\$\$")


@pytest.fixture
def real_solution(transactional_db):
    """The first Qwen2.5-Math response with display math written over several lines."""
    row = next(r for r in real_rows() if re.search(r"\\\[\n", r["response"][0]))
    problem = ProblemFactory(statement=row["question"], ground_truth_answer=row["answer"])
    solution = SolutionFactory(problem=problem, steps=split_steps(row["response"][0]))
    queueing.ensure_default_queue()
    return solution


def assert_math_rendered(page, selector):
    page.locator(f"{selector} .katex").first.wait_for()
    assert page.locator(f"{selector} .katex-display").count() >= 1
    assert page.locator(f"{selector} .math[data-rendered='error']").count() == 0
    assert page.locator(f"{selector} .math:not([data-rendered])").count() == 0
    assert not RAW_DELIMITERS.search(page.inner_text(selector))
    assert "**" not in page.inner_text(selector)


def test_real_multi_line_display_math_renders_on_the_labeling_and_review_pages(
        new_page, live_server, real_solution, artifacts):
    user_with_role("kim", "annotator")
    user_with_role("rita", "reviewer")
    page = new_page()
    log_in(page, live_server, "kim")
    annotation = start_labeling(page, live_server)
    assert_math_rendered(page, ".steps")
    assert page.locator(".problem .boxed .katex").count() == 1  # the answer \dfrac{1}{9} as math
    assert page.locator(".steps strong").count() >= 1            # **bold** lead-ins
    page.screenshot(path=str(artifacts / "math-labeling.png"), full_page=True)

    # htmx swaps the task after a rating: the new content is rendered too.
    page.keyboard.press("3")
    page.locator("#step-0[data-rating='1']").wait_for()
    assert_math_rendered(page, ".steps")

    labeling.submit(annotation=annotation, finish_reason="give_up", note="test")
    review = new_page()
    log_in(review, live_server, "rita")
    review.goto(f"{live_server.url}/review/{annotation.pk}/")
    assert_math_rendered(review, "main")
    review.screenshot(path=str(artifacts / "math-review-detail.png"), full_page=True)
    review.goto(f"{live_server.url}/review/")
    assert "Two fair 6-sided dice" in review.inner_text("table")
    assert not RAW_DELIMITERS.search(review.inner_text("table"))


def test_katex_parses_every_formula_of_the_real_responses(new_page, live_server, real_solution):
    user_with_role("kim", "annotator")
    page = new_page()
    log_in(page, live_server, "kim")
    start_labeling(page, live_server)
    page.locator(".steps .katex").first.wait_for()
    segments = [s for r in real_responses() for s in rendering.segments(r)]
    formulas = sorted({(s.body, s.display) for s in segments if s.kind == "math"})
    failures = page.evaluate("""(formulas) => formulas.filter(([tex, display]) => {
        try { katex.renderToString(tex, {displayMode: display, throwOnError: true, trust: false, strict: "ignore"});
              return false; } catch (e) { return true; } })""", [list(f) for f in formulas])
    assert len(formulas) > 300
    assert failures == []


MIXED_STEPS = [
    "Let's set up the sum:\n$$\n\\sum_{k=1}^{n} k\n= \\frac{n(n+1)}{2}\n$$",
    "Solving the system:\n\\begin{align*}\n2x + y &= 7 \\\\\nx - y &= -1\n\\end{align*}\nso **both** equations hold.",
    "Define \\(f\\) piecewise:\n\\[\nf(x) = \\begin{cases} x^2 & x \\ge 0 \\\\ -x & x < 0 \\end{cases}\n\\]",
    "She pays $5 for eggs and $10 for milk, so $15 in all; with $x$ eggs it is $5x$.",
    "Check with `python`:\n```python\nprint(2 * 3 * 4)  # $24\n```\n1. *first* item\n2. second item with $\\sqrt{2}$",
    "KaTeX runs untrusted: \\(\\href{javascript:alert(1)}{click}\\) and \\(\\htmlId{x}{y}\\).",
    "A long one: \\[ " + " + ".join(f"\\frac{{{k}}}{{{k + 1}}}" for k in range(1, 30)) + " \\]",
]


def test_every_kind_of_math_renders_and_fits_a_phone_screen(new_page, live_server, artifacts):
    SolutionFactory(problem=ProblemFactory(statement="Compute $\\displaystyle\\sum_{k=1}^{n} k$ for $n = 10$."),
                    steps=MIXED_STEPS)
    queueing.ensure_default_queue()
    user_with_role("kim", "annotator")
    page = new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, live_server, "kim")
    start_labeling(page, live_server)
    assert_math_rendered(page, "main")
    formulas = sum(1 for step in MIXED_STEPS for s in rendering.segments(step) if s.kind == "math")
    assert page.locator(".steps .math[data-rendered='1']").count() == formulas == 10
    assert page.locator(".steps a, .steps #x").count() == 0  # trust: false, so no link or id from data
    text = page.inner_text(".steps")
    assert "She pays $5 for eggs and $10 for milk, so $15 in all" in text  # prices stay prices
    assert "print(2 * 3 * 4)  # $24" in text and page.locator(".steps pre code").count() == 1
    assert page.locator(".steps em").count() == 1 and page.locator(".steps strong").count() == 1
    # Wide formulas scroll inside their step; the page itself never scrolls sideways.
    page.screenshot(path=str(artifacts / "math-mixed-phone.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_an_escaped_dollar_written_as_math_reads_as_a_price(new_page, live_server):
    """MATH writes "$\\$$1.20": KaTeX draws the sign, the amount follows it, no delimiter is left."""
    SolutionFactory(problem=ProblemFactory(statement="Carol has $\\$$1.20 in nickels and dimes."),
                    steps=["She spends $\\$$0.45, so $\\$$0.75 is left.", "# Answer\n\n0.75"])
    queueing.ensure_default_queue()
    user_with_role("kim", "annotator")
    page = new_page()
    log_in(page, live_server, "kim")
    start_labeling(page, live_server)
    page.locator(".problem .katex").first.wait_for()
    assert page.locator("main .math[data-rendered='error']").count() == 0
    assert "Carol has $1.20 in nickels" in as_read(page, ".problem")
    assert "She spends $0.45, so $0.75 is left." in as_read(page, ".steps")
    assert "$$" not in as_read(page, "main")


def as_read(page, selector) -> str:
    """The text a reader sees: KaTeX's drawing of each formula, without its MathML twin for screen readers."""
    return page.locator(selector).evaluate("""element => {
        const copy = element.cloneNode(true);
        copy.querySelectorAll(".katex-mathml").forEach((mathml) => mathml.remove());
        return copy.textContent.replace(/\\s+/g, " ");
    }""")
