"""Task after task on real model output (Qwen2.5-Math responses), keyboard only, in Chromium.

The submit answers with the next task's page swapped in as the body (no page load): on each
new task the math must be typeset by KaTeX, the keys must act on it, the URL, step count and
progress must be its own, and nothing may break the CSP or log an error. Real responses have
what synthetic ones lack: multi-line `\\[ ... \\]` display math, `\\(...\\)`, Markdown emphasis
and `\\boxed{}`.
"""
import json
import re

import pytest

from annotate.labeling import queueing
from annotate.models import Annotation, StepLabel
from annotate.pool import importing
from tests.browser.test_labeling_browser import log_in, start_labeling, wait_rating
from tests.conftest import TEST_DATA
from tests.factories import user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RESPONSES = TEST_DATA / "model-responses" / "math_qwen25_cot_20x8.jsonl"
PROBLEMS = 4  # the first response to each of the file's first problems: one task each
# LaTeX that KaTeX should have replaced; what is left of a .rendered element outside .katex.
RAW_LATEX = re.compile(r"\\(frac|dfrac|boxed|times|cdot|sqrt|le|ge|pi|\[|\]|\(|\))|\$")


@pytest.fixture
def real_pool(transactional_db, tmp_path):
    rows = [json.loads(line) for line in RESPONSES.open()][:PROBLEMS]
    path = tmp_path / "qwen.jsonl"
    path.write_text("".join(
        json.dumps({"problem": row["question"], "ground_truth_answer": row["answer"],
                    "solution": row["response"][0], "generator": "qwen2.5-math"}) + "\n"
        for row in rows
    ))
    summary = importing.import_pool(path=path, format="generic")
    assert summary.created == PROBLEMS
    assert queueing.enqueue_imported(solution_ids=summary.solution_ids) == PROBLEMS  # as import_pool's command does


@pytest.fixture
def watched_page(new_page):
    """A page whose console errors, page errors and CSP violations are all kept."""
    page = new_page()
    page.errors = []
    page.on("console", lambda m: m.type == "error" and not (m.location or {}).get("url", "").endswith("/favicon.ico")
            and page.errors.append(f"console: {m.text}"))
    page.on("pageerror", lambda error: page.errors.append(f"page error: {error}"))
    page.context.add_init_script(
        "document.addEventListener('securitypolicyviolation', (e) =>"
        " console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI));"
    )
    return page


def current_task(page) -> Annotation:
    pk = int(re.search(r"/label/(\d+)/$", page.url).group(1))
    assert page.get_attribute("#task", "data-annotation") == str(pk)  # the URL is this task's
    return Annotation.objects.select_related("solution__problem").get(pk=pk)


def assert_math_typeset(page, task: Annotation):
    if RAW_LATEX.search(task.solution.problem.statement):
        assert page.locator(".problem .rendered .katex").count() >= 1
    assert page.locator("#task .rendered .katex").count() >= 1
    assert page.locator(".katex-error").count() == 0
    left = page.evaluate("""() => [...document.querySelectorAll('.rendered')].map((el) => {
        const copy = el.cloneNode(true);
        copy.querySelectorAll('.katex').forEach((k) => k.remove());
        return copy.innerText; })""")
    raw = [text for text in left if RAW_LATEX.search(text)]
    assert not raw, f"LaTeX left as text: {raw}"


def assert_head(page, rated: int, steps: int):
    assert page.inner_text("#task-head .count") == f"{rated} of {steps} steps rated"
    progress = page.locator("#task-head progress")
    assert (progress.get_attribute("value"), progress.get_attribute("max")) == (str(rated), str(steps))


def test_three_real_tasks_in_a_row_by_keyboard(watched_page, live_server, real_pool):
    page = watched_page
    user_with_role("ria", "annotator")
    log_in(page, live_server, "ria")
    start_labeling(page, live_server)
    page.evaluate("() => { window.sameDocument = true; }")
    done = []
    for number in range(3):
        task = current_task(page)
        assert task.status == "in_progress" and task.pk not in done
        assert page.evaluate("() => window.sameDocument === true")  # swapped in, never loaded
        page.locator("#step-0.cursor").wait_for()
        steps = task.solution.steps.count()
        assert page.locator("#task .step").count() == steps
        assert_head(page, 0, steps)
        assert_math_typeset(page, task)
        # The second task stops at a first error; the others are rated through.
        plan = [1, -1] if number == 1 else [1] * steps
        for index, rating in enumerate(plan):
            page.keyboard.press({1: "3", -1: "1"}[rating])
            wait_rating(page, index, rating)
            # Stopping at the first error: the steps after it are out of the count.
            assert_head(page, index + 1, index + 1 if rating == -1 else steps)
        page.locator("#submit-form button:not([disabled])").wait_for()
        page.keyboard.press("Enter")
        page.wait_for_url(lambda url, pk=task.pk: re.search(r"/label/\d+/$", url) and not url.endswith(f"/{pk}/"))
        ratings = [label.completions.get().rating
                   for label in StepLabel.objects.filter(annotation=task).order_by("index")]
        task.refresh_from_db()
        assert (task.status, ratings) == ("submitted", plan)  # the keys acted on this task
        assert task.finish_reason == ("found_error" if number == 1 else "solution")
        done.append(task.pk)
    page.locator("#step-0.cursor").wait_for()
    assert_math_typeset(page, current_task(page))  # the fourth task, swapped in too
    page.go_back()  # the last submitted task, loaded again as submitted, math and all
    page.wait_for_url(f"{live_server.url}/label/{done[-1]}/")
    page.locator("#task.submitted").wait_for()
    assert_math_typeset(page, current_task(page))
    assert page.errors == []
    # The listener hears violations: an inline script is one under this CSP.
    page.evaluate("() => { const s = document.createElement('script'); s.textContent = '1'; document.head.append(s); }")
    page.wait_for_timeout(200)
    assert any("CSP violation" in error for error in page.errors), page.errors


def test_the_next_task_opens_at_the_top_as_a_loaded_one_does(watched_page, live_server, real_pool):
    page = watched_page
    page.set_viewport_size({"width": 1280, "height": 600})  # every real task is taller than this
    user_with_role("rob", "annotator")
    log_in(page, live_server, "rob")
    first = start_labeling(page, live_server)
    for index in range(first.solution.steps.count()):
        page.keyboard.press("3")
        wait_rating(page, index, 1)
    page.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")  # where rating the last step ends
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: re.search(r"/label/\d+/$", url) and not url.endswith(f"/{first.pk}/"))
    page.locator("#step-0.cursor").wait_for()
    swapped = page.evaluate("() => window.scrollY")
    # The "Submitted as" notice has its own line above the swapped-in task (it never covers a step),
    # so the first step may sit lower by that line than on a loaded page, and no more.
    notice = page.evaluate("() => { const m = document.querySelector('.messages'); "
                           "return m ? m.getBoundingClientRect().height : 0; }")
    page.goto(page.url)  # the same task, loaded
    page.locator("#step-0.cursor").wait_for()
    loaded = page.evaluate("() => window.scrollY")
    assert loaded <= swapped <= loaded + notice
