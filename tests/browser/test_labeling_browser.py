"""The labeling page in a real Chromium: keyboard only, clicks, stop at first error, give up, reload, two people."""
import re
import time

import pytest

from annotate.labeling import queueing
from annotate.models import Annotation, LabelingConfig, Project, QueueItem, StepLabel
from tests.factories import ProblemFactory, SolutionFactory, user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pass-for-tests"


@pytest.fixture
def pool(transactional_db):
    problem = ProblemFactory(
        statement="The denominator of a fraction is 7 less than 3 times the numerator. If the fraction is "
                  "equivalent to $2/5$, what is the numerator? <script>window.pwned = 1</script>",
        ground_truth_answer="14",
    )
    steps = ["Let's call the numerator $x$.", "So the denominator is $3x-7$.",
             "We know that $\\frac{x}{3x-7} = \\frac{2}{5}$.", "So $5x = 2(3x-7)$, that is $5x = 6x - 14$.",
             "So $x = 7$.", "# Answer\n\n7"]
    solutions = [SolutionFactory(problem=problem, steps=steps)]
    solutions += [SolutionFactory(steps=[f"Other solution {i}, step one.", "Step two."]) for i in range(3)]
    queueing.ensure_default_queue()
    return solutions


def log_in(page, live_server, username):
    """Log in with the keyboard alone: type, Tab, type, Enter."""
    page.goto(f"{live_server.url}/accounts/login/")
    page.focus("#id_username")
    page.keyboard.type(username)
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{live_server.url}/")


def start_labeling(page, live_server):
    # "Start labeling" takes the focus on the home page (autofocus lands just after load).
    # Predicates are functions: Playwright evals a string one while polling, which the CSP forbids.
    page.wait_for_function("() => document.activeElement?.matches('button.big')")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/label/\d+/$"))
    page.wait_for_function("() => document.querySelector('#step-0.cursor') !== null")
    return Annotation.objects.get(pk=int(page.url.rstrip("/").rsplit("/", 1)[1]))


def wait_rating(page, index, rating):
    """Wait for the step's new rating, after htmx has settled its classes too."""
    word = {-1: "wrong", 0: "neutral", 1: "good"}[rating]
    page.locator(f"#step-{index}.rated-{word}[data-rating='{rating}']").wait_for()


def ratings(annotation):
    return [sl.completions.get().rating for sl in StepLabel.objects.filter(annotation=annotation).order_by("index")]


def test_keyboard_only_labeling_of_a_whole_solution(new_page, live_server, pool, artifacts):
    user_with_role("kim", "annotator")
    page = new_page()
    log_in(page, live_server, "kim")
    task = start_labeling(page, live_server)
    assert task.solution == pool[0]
    assert page.evaluate("window.pwned") is None  # Imported <script> shown as text, never run.
    assert page.locator(".problem .katex").count() >= 1  # LaTeX rendered by the vendored KaTeX.
    assert "<<" not in page.inner_text(".steps")

    page.keyboard.press("3")
    page.keyboard.press("3")
    page.keyboard.press("u")   # Undo step 2 ...
    page.keyboard.press("2")   # ... and rate it neutral instead.
    page.keyboard.press("k")   # Back up to step 1 to correct it in place.
    page.keyboard.press("k")
    page.keyboard.press("2")
    page.keyboard.press("f")   # The cursor returned to step 3: flag it.
    page.locator("#step-2 .flag-button.on").wait_for()
    page.mouse.move(0, 0)
    page.screenshot(path=str(artifacts / "labeling-page.png"), full_page=True)
    for _ in range(4):
        page.keyboard.press("3")
    wait_rating(page, 5, 1)
    page.keyboard.press("?")
    assert page.locator("dialog#keys").is_visible()
    page.keyboard.press("Escape")

    page.keyboard.press("Enter")  # Submit, and straight on to the next task.
    page.wait_for_url(lambda url: re.search(r"/label/\d+/$", url) and url != f"{live_server.url}/label/{task.pk}/")
    page.locator("#step-0.cursor").wait_for()
    task.refresh_from_db()
    assert task.status == "submitted" and task.finish_reason == "solution"
    assert ratings(task) == [0, 0, 1, 1, 1, 1]
    assert StepLabel.objects.get(annotation=task, index=2).completions.get().flagged is True
    assert task.total_time_ms and task.total_time_ms > 0
    assert QueueItem.objects.get(pk=task.queue_item_id).status == QueueItem.Status.DONE


def test_clicks_on_rows_a_rating_swapped_in_are_saved(new_page, live_server, pool):
    """Each rating's answer redraws the next row (unlocked now) with forms that carry no token of
    their own: their posts go through htmx, with the page's."""
    user_with_role("ash", "annotator")
    page = new_page()
    log_in(page, live_server, "ash")
    task = start_labeling(page, live_server)
    for index, face in enumerate(["good", "neutral", "good"]):
        page.click(f"#step-{index} .face.{face}")
        wait_rating(page, index, {"good": 1, "neutral": 0}[face])
    page.click("#step-1 .flag-button")
    page.locator("#step-1 .flag-button.on").wait_for()
    assert ratings(task)[:3] == [1, 0, 1]
    assert StepLabel.objects.get(annotation=task, index=1).completions.get().flagged is True


def test_stop_at_first_error_greys_the_rest_and_submits_found_error(new_page, live_server, pool):
    user_with_role("lee", "annotator")
    page = new_page()
    log_in(page, live_server, "lee")
    task = start_labeling(page, live_server)
    assert page.locator("#step-1.locked").count() == 1  # Later steps wait for earlier ones.
    assert page.locator("#step-1 button.face").first.is_disabled()
    page.keyboard.press("3")
    page.keyboard.press("1")
    wait_rating(page, 1, -1)
    assert page.locator(".step.after_error").count() == 4
    assert "first error" in page.inner_text("#submit-form")
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: url != f"{live_server.url}/label/{task.pk}/")
    task.refresh_from_db()
    assert task.finish_reason == "found_error"
    assert ratings(task) == [1, -1]


def test_give_up_requires_a_reason(new_page, live_server, pool):
    user_with_role("max", "annotator")
    page = new_page()
    log_in(page, live_server, "max")
    task = start_labeling(page, live_server)
    page.click("details.giveup summary")  # "Give up (g) or report a bad problem (b)…"
    page.click("text=Stop this task")  # Empty reason: the browser refuses to send the form.
    assert Annotation.objects.get(pk=task.pk).status == "in_progress"
    page.fill("#note", "The problem needs a figure I cannot see.")
    page.check("input[value=bad_problem]")
    page.click("text=Stop this task")
    page.wait_for_url(lambda url: url != f"{live_server.url}/label/{task.pk}/")
    task.refresh_from_db()
    assert (task.finish_reason, task.finish_note) == ("bad_problem", "The problem needs a figure I cannot see.")


def test_reload_mid_task_loses_nothing(new_page, live_server, pool):
    user_with_role("ana", "annotator")
    page = new_page()
    log_in(page, live_server, "ana")
    task = start_labeling(page, live_server)
    page.mouse.move(200, 300)
    page.wait_for_timeout(1200)  # Some active time on step 1.
    page.keyboard.press("3")
    page.keyboard.press("2")
    page.keyboard.press("f")
    page.wait_for_function("() => document.querySelector('#step-2')?.dataset.flagged === '1'")
    page.reload()
    assert page.get_attribute("#step-0", "data-rating") == "1"
    assert page.get_attribute("#step-1", "data-rating") == "0"
    assert page.get_attribute("#step-2", "data-flagged") == "1"
    assert int(page.get_attribute("#task", "data-total-ms")) >= 1000
    page.wait_for_function("() => document.querySelector('#step-2.cursor') !== null")
    page.keyboard.press("1")
    wait_rating(page, 2, -1)
    # Going home and back resumes the same task.
    page.goto(f"{live_server.url}/")
    start_labeling_again = page.locator("text=Resume your task")
    start_labeling_again.click()
    page.wait_for_url(f"{live_server.url}/label/{task.pk}/")
    assert ratings(task) == [1, 0, -1, None, None, None]


def test_two_browsers_never_get_the_same_item(new_page, live_server, pool):
    user_with_role("one", "annotator")
    user_with_role("two", "annotator")
    first, second = new_page(), new_page()
    log_in(first, live_server, "one")
    log_in(second, live_server, "two")
    # Both press Start at once: neither waits for the other's answer.
    first.evaluate("document.querySelector('form[action$=\"/label/next\"]').requestSubmit()")
    second.evaluate("document.querySelector('form[action$=\"/label/next\"]').requestSubmit()")
    first.wait_for_url(re.compile(r"/label/\d+/$"))
    second.wait_for_url(re.compile(r"/label/\d+/$"))
    assert first.url != second.url
    assert first.inner_text(".steps") != second.inner_text(".steps")
    leased = QueueItem.objects.filter(status=QueueItem.Status.LEASED)
    assert leased.count() == 2
    assert len({item.solution_id for item in leased}) == 2
    assert {item.leased_to.username for item in leased} == {"one", "two"}


def test_a_closed_tabs_item_comes_back_to_the_queue(new_page, live_server, pool):
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"lease_seconds": 2})
    user_with_role("gone", "annotator")
    user_with_role("next", "annotator")
    first = new_page()
    log_in(first, live_server, "gone")
    abandoned = start_labeling(first, live_server)
    first.context.close()  # The tab (and its heartbeats) go away mid-task.
    time.sleep(2.5)  # Longer than the lease.
    second = new_page()
    log_in(second, live_server, "next")
    taken = start_labeling(second, live_server)
    assert taken.solution_id == abandoned.solution_id
    assert QueueItem.objects.get(pk=abandoned.queue_item_id).leased_to.username == "next"


def test_a_submit_answers_with_the_next_task_in_the_same_page(new_page, live_server, pool):
    """No page load between tasks: the submit's answer is the next task, under its own URL, and
    the keys, the cursor, the times and the heartbeat are the new task's."""
    user_with_role("sam", "annotator")
    page = new_page()
    log_in(page, live_server, "sam")
    first = start_labeling(page, live_server)
    page.evaluate("() => { window.sameDocument = true; }")
    for index in range(len(ratings(first))):
        page.keyboard.press("3")
        wait_rating(page, index, 1)
    for x in range(4):  # Two active seconds on the first task.
        page.mouse.move(100 + 10 * x, 100)
        page.wait_for_timeout(500)
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: re.search(r"/label/\d+/$", url) and url != f"{live_server.url}/label/{first.pk}/")
    swapped = time.monotonic()
    second = Annotation.objects.get(pk=int(page.url.rstrip("/").rsplit("/", 1)[1]))
    assert second.pk != first.pk and Annotation.objects.get(pk=first.pk).is_submitted
    assert page.evaluate("() => window.sameDocument === true")  # swapped in, not loaded
    page.wait_for_function("() => document.querySelector('#step-0.cursor') !== null")
    page.keyboard.press("3")
    wait_rating(page, 0, 1)
    assert ratings(second)[0] == 1
    assert page.get_attribute("#task", "data-heartbeat") == f"/label/{second.pk}/heartbeat"
    assert Annotation.objects.get(pk=first.pk).total_time_ms >= 2000
    # Its own clock, not the first task's carried on.
    assert Annotation.objects.get(pk=second.pk).total_time_ms <= (time.monotonic() - swapped) * 1000 + 500
    page.go_back()  # No stale snapshot: the first task's page is loaded again, as submitted.
    page.wait_for_url(f"{live_server.url}/label/{first.pk}/")
    page.locator("#task.submitted").wait_for()
