"""The labeling workspace in a real Chromium: the current step is never under the submit bar,
a -1 is not changed by a stray key, a submit is seen, selected faces are legible, give up and
bad problem have keys, and 403 / 404 pages keep the site's layout."""
import re

import pytest

from annotate.labeling import queueing
from annotate.models import Annotation, StepLabel
from steps import splitting
from tests.browser.test_labeling_browser import log_in, ratings, start_labeling, wait_rating
from tests.factories import ProblemFactory, SolutionFactory, user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SIZES = {"desktop": (1366, 768), "phone": (390, 844)}


def model_style_solution(parts: int = 9) -> str:
    """Text the way Qwen2.5-Math writes it: numbered bold lead-ins, display math over lines."""
    blocks = [
        f"{n}. **Work out the {n}th term:**\n   Using the rule from before, the term is:\n"
        f"   \\[\n   a_{{{n}}} = \\frac{{{n}^2 + 1}}{{{n} + 2}} \\cdot \\sqrt{{{n} + 7}}\n   \\]"
        for n in range(1, parts + 1)
    ]
    return "To find the sum, we follow these steps:\n\n" + "\n\n".join(blocks) + (
        "\n\nTherefore, the final answer is \\(\\boxed{42}\\).")


@pytest.fixture
def long_task_pool(transactional_db):
    problem = ProblemFactory(statement="Let $a_n = \\frac{n^2+1}{n+2}\\sqrt{n+7}$. Find $\\sum_{n=1}^{9} a_n$, "
                                       "rounded to the nearest integer.", ground_truth_answer="42")
    steps = splitting.split_steps(model_style_solution(), "auto")
    # Two solutions of the same problem: the second task looks just like the first.
    solutions = [SolutionFactory(problem=problem, steps=steps) for _ in range(2)]
    queueing.ensure_default_queue()
    return solutions


@pytest.fixture
def short_pool(transactional_db):
    problem = ProblemFactory(statement="What is $2 + 3$?", ground_truth_answer="5")
    solutions = [SolutionFactory(problem=problem, steps=["We add: $2 + 3 = 5$.", "So it is 5.", "# Answer\n\n5"])
                 for _ in range(3)]
    queueing.ensure_default_queue()
    return solutions


def sized_page(new_page, size):
    page = new_page()
    page.set_viewport_size(dict(zip(("width", "height"), SIZES[size], strict=True)))
    return page


def cursor_clearance(page):
    """How the cursor step sits in the window: its top, and the gap above the sticky bar."""
    return page.evaluate("""() => {
        const step = document.querySelector('.step.cursor').getBoundingClientRect();
        const bar = document.querySelector('#task .submitbar').getBoundingClientRect();
        return {top: step.top, gap: Math.min(bar.top, window.innerHeight) - step.bottom,
                height: step.height, room: Math.min(bar.top, window.innerHeight)};
    }""")


def assert_cursor_fully_visible(page, where):
    # A step's scroll ends when its answer has settled; scrolling itself is instant.
    page.wait_for_timeout(50)
    box = cursor_clearance(page)
    assert box["top"] >= 0, f"{where}: the step's top is above the window ({box})"
    assert box["gap"] >= 0, f"{where}: the step's bottom is {-box['gap']:.0f} px under the submit bar ({box})"


@pytest.mark.parametrize("size", SIZES)
def test_the_current_step_is_never_under_the_submit_bar(new_page, live_server, long_task_pool, artifacts, size):
    user_with_role("sam", "annotator")
    page = sized_page(new_page, size)
    log_in(page, live_server, "sam")
    task = start_labeling(page, live_server)
    count = StepLabel.objects.filter(annotation=task).count()
    assert count >= 10  # long enough that the page scrolls at both sizes
    assert page.evaluate("document.documentElement.scrollHeight") > SIZES[size][1] * 1.5
    assert_cursor_fully_visible(page, "on arrival")
    for index in range(count - 1):
        page.keyboard.press("3")
        wait_rating(page, index, 1)
        page.locator(f"#step-{index + 1}.cursor").wait_for()
        assert_cursor_fully_visible(page, f"after rating step {index + 1}")
        if index == count // 2:
            page.mouse.move(0, 0)
            page.screenshot(path=str(artifacts / f"workspace-{size}.png"))
    for back in range(3):  # Moving back up keeps the step clear of the top too.
        page.keyboard.press("k")
        assert_cursor_fully_visible(page, f"after moving up {back + 1}")
    page.keyboard.press("j")
    assert_cursor_fully_visible(page, "after moving down")


def test_a_stray_key_never_changes_a_minus_one(new_page, live_server, short_pool, artifacts):
    user_with_role("ray", "annotator")
    page = new_page()
    log_in(page, live_server, "ray")
    task = start_labeling(page, live_server)
    page.keyboard.press("3")
    page.keyboard.press("1")
    wait_rating(page, 1, -1)
    assert page.locator(".step.after_error").count() == 1

    page.keyboard.press("3")  # A stray key on the first error: a question, not a change.
    dialog = page.locator("dialog#change-error")
    dialog.wait_for()
    assert "Step 2 is rated −1" in dialog.inner_text() and "+1" in dialog.inner_text()
    page.screenshot(path=str(artifacts / "workspace-change-a-minus-one.png"))
    page.keyboard.press("3")  # Keys while it asks do nothing...
    page.keyboard.press("Escape")  # ... and Esc keeps the -1.
    assert not dialog.is_visible()
    page.wait_for_timeout(300)
    assert ratings(task) == [1, -1, None]
    assert page.locator(".step.after_error").count() == 1

    page.click("#step-1 .face.neutral")  # A click asks too; confirming changes it.
    dialog.wait_for()
    dialog.get_by_role("button", name="Change it").click()
    wait_rating(page, 1, 0)
    assert ratings(task) == [1, 0, None]
    assert page.locator(".step.after_error").count() == 0

    page.keyboard.press("1")  # The cursor moved on to step 3: a new -1 there ...
    wait_rating(page, 2, -1)
    page.keyboard.press("u")  # ... is taken back by undo without a question.
    page.locator("#step-2.current[data-rating='']").wait_for()
    assert not dialog.is_visible()
    assert ratings(task) == [1, 0, None]


def test_a_submit_is_announced_even_when_the_next_task_has_the_same_problem(new_page, live_server, short_pool):
    user_with_role("una", "annotator")
    page = new_page()
    log_in(page, live_server, "una")
    first = start_labeling(page, live_server)
    statement = page.inner_text(".problem .statement")
    for index in range(3):
        page.keyboard.press("3")
        wait_rating(page, index, 1)
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: re.search(r"/label/\d+/$", url) and url != f"{live_server.url}/label/{first.pk}/")
    notice = page.locator(".messages .toast")
    notice.wait_for()
    assert "Submitted as solution" in notice.inner_text()
    assert page.inner_text(".problem .statement") == statement  # the same problem again
    page.locator("#step-0.cursor").wait_for()
    # It has its own line above the page (never over a step) and fades but keeps that room:
    # nothing moves under the cursor, and it does not stay.
    cursor_top = page.locator("#step-0").bounding_box()["y"]
    page.wait_for_function("() => getComputedStyle(document.querySelector('.messages .toast')).visibility === 'hidden'",
                           timeout=10_000)
    assert page.locator("#step-0").bounding_box()["y"] == cursor_top


CONTRAST = """(el) => {
    const rgb = (s) => s.match(/[\\d.]+/g).map(Number);
    const lin = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    const lum = ([r, g, b]) => 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
    const style = getComputedStyle(el);
    const fg = rgb(style.color), bg = rgb(style.backgroundColor);
    const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    return {ratio: (hi + 0.05) / (lo + 0.05), fgAlpha: fg[3] ?? 1, bgAlpha: bg[3] ?? 1, opacity: Number(style.opacity),
            color: style.color, background: style.backgroundColor};
}"""


def test_selected_faces_meet_wcag_aa_contrast(new_page, live_server, short_pool, artifacts):
    user_with_role("ivy", "annotator")
    page = new_page()
    log_in(page, live_server, "ivy")
    start_labeling(page, live_server)
    for index, (key, rating) in enumerate([("3", 1), ("2", 0), ("1", -1)]):
        page.keyboard.press(key)
        wait_rating(page, index, rating)
    page.mouse.move(0, 0)
    page.locator(".steps").screenshot(path=str(artifacts / "workspace-selected-faces.png"))
    for index, face in enumerate(["good", "neutral", "bad"]):
        button = page.locator(f"#step-{index} .face.{face}.on")
        contrast = button.evaluate(CONTRAST)
        # The glyph and its background as drawn: opaque, at full opacity, and at least 4.5:1.
        assert (contrast["fgAlpha"], contrast["bgAlpha"], contrast["opacity"]) == (1, 1, 1), contrast
        assert contrast["ratio"] >= 4.5, f"{face}: {contrast}"


@pytest.mark.parametrize(("key", "reason"), [("g", "give_up"), ("b", "bad_problem")])
def test_give_up_and_bad_problem_have_keys(new_page, live_server, short_pool, key, reason):
    user_with_role("kai", "annotator")
    page = new_page()
    log_in(page, live_server, "kai")
    task = start_labeling(page, live_server)
    page.keyboard.press("?")
    help_text = page.inner_text("dialog#keys")
    assert "give up" in help_text and "bad problem" in help_text
    page.keyboard.press("Escape")

    page.keyboard.press("3")
    page.keyboard.press(key)  # Waits for the rating's answer, then opens the form with the reason chosen.
    page.wait_for_function("() => document.activeElement?.id === 'note'")
    assert page.is_checked(f"input[name=finish_reason][value={reason}]")
    page.keyboard.type("Step two refers to a figure that is not there.")
    page.keyboard.press("Control+Enter")
    page.wait_for_url(lambda url: url != f"{live_server.url}/label/{task.pk}/")
    task.refresh_from_db()
    assert task.finish_reason == reason
    assert task.finish_note == "Step two refers to a figure that is not there."
    assert ratings(task) == [1]


def test_escape_in_the_reason_goes_back_to_the_steps(new_page, live_server, short_pool):
    user_with_role("leo", "annotator")
    page = new_page()
    log_in(page, live_server, "leo")
    task = start_labeling(page, live_server)
    page.keyboard.press("g")
    page.wait_for_function("() => document.activeElement?.id === 'note'")
    page.keyboard.press("Escape")
    assert not page.locator("details.giveup").evaluate("d => d.open")
    page.keyboard.press("3")  # Keys act on the steps again.
    wait_rating(page, 0, 1)
    assert Annotation.objects.get(pk=task.pk).status == "in_progress"


@pytest.mark.parametrize("size", SIZES)
def test_403_and_404_pages_keep_the_sites_layout(new_page, live_server, short_pool, artifacts, size):
    user_with_role("ned", "annotator")
    page = sized_page(new_page, size)
    log_in(page, live_server, "ned")
    for path, status, heading in [("/imports/", 403, "not open to you"), ("/label/999999/", 404, "nothing here")]:
        response = page.goto(f"{live_server.url}{path}")
        assert response.status == status
        assert heading in page.inner_text("main h1")
        assert page.locator("header.topbar nav").is_visible()  # the site's own header and menu
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(244, 245, 247)"
        page.screenshot(path=str(artifacts / f"error-{status}-{size}.png"))
