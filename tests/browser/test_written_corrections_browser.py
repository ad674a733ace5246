"""Written corrections in a real Chromium, PRM800K phase-1 style: after a -1 the annotator
presses `w`, writes the step as it should be, goes on rating from it and submits; the export
files hold the labels exactly as given (read with the repo's PRM800K parser)."""
import json

import pytest

from annotate.labeling import queueing
from annotate.models import LabelingConfig, Project
from annotate.pool import exporting, prm800k
from annotate.pool.exporting import ExportOptions
from tests.annotations import without_assistance
from tests.browser.test_labeling_browser import log_in, ratings, start_labeling, wait_rating
from tests.factories import ProblemFactory, SolutionFactory, user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

STEPS = ["Let $x = 2$.", "Then $2x = 5$.", "So $2x + 1 = 5$.", "# Answer\n\n5"]
REWRITE = "Then $2x = 4$."


def phase1(*, written_corrections: bool = True) -> None:
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={
        "allow_human_completion": written_corrections, "stop_at_first_error": False})


@pytest.fixture
def wrong_solution(transactional_db):
    problem = ProblemFactory(statement="If $x = 2$, what is $2x + 1$?", ground_truth_answer="5")
    solution = SolutionFactory(problem=problem, steps=STEPS, is_correct=False)
    queueing.ensure_default_queue()
    return solution


def export(tmp_path, format: str) -> list[dict]:
    """The export file the admin downloads, written by the export code, one JSON object a line."""
    path = tmp_path / f"{format}.jsonl"
    exporting.write_export(path=path, format=format, options=ExportOptions())
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_minus_one_rewritten_with_w_is_exported_as_the_human_completion(new_page, live_server, wrong_solution,
                                                                            tmp_path):
    phase1()
    user_with_role("pat", "annotator")
    page = new_page()
    log_in(page, live_server, "pat")
    task = start_labeling(page, live_server)
    page.keyboard.press("3")
    page.keyboard.press("1")
    wait_rating(page, 1, -1)
    # The screen offers the rewrite, with its key, on the step rated -1.
    assert "write this step as it should be w" in page.inner_text("#step-1 form.human")
    page.keyboard.press("w")
    page.wait_for_function("() => document.activeElement?.id === 'human-1'")
    page.keyboard.press("Escape")  # Back to the steps without writing ...
    page.wait_for_function("() => document.activeElement?.id === 'step-2'")
    page.keyboard.press("w")  # ... and into the box again.
    page.wait_for_function("() => document.activeElement?.id === 'human-1'")
    page.keyboard.type(REWRITE)
    page.keyboard.press("Control+Enter")
    page.locator("#step-1 form.human button", has_text="Update corrected step").wait_for()
    # Saved: the cursor is on the next step to rate, and the keys rate it.
    page.wait_for_function("() => document.activeElement?.id === 'step-2'")
    page.keyboard.press("3")
    wait_rating(page, 2, 1)
    page.keyboard.press("3")
    wait_rating(page, 3, 1)
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: url != f"{live_server.url}/label/{task.pk}/")
    task.refresh_from_db()
    assert (task.status, task.finish_reason) == ("submitted", "found_error")
    assert ratings(task) == [1, -1, 1, 1]

    (line,) = export(tmp_path, "prm800k")
    prm800k.parse_line(line, 1)  # the PRM800K schema's validator
    steps = line["label"]["steps"]
    assert [[(c["text"], c["rating"]) for c in step["completions"]] for step in steps] == [
        [(text, rating)] for text, rating in zip(STEPS, [1, -1, 1, 1], strict=True)]
    assert [step["chosen_completion"] for step in steps] == [0, None, 0, 0]
    assert steps[1]["human_completion"]["text"] == REWRITE
    assert [step["human_completion"] for step in (steps[0], *steps[2:])] == [None] * 3

    prompt = wrong_solution.problem.statement
    assert without_assistance(export(tmp_path, "trl")) == [
        {"prompt": prompt, "completions": STEPS[:2], "labels": [True, False]},
        {"prompt": prompt, "completions": [STEPS[0], REWRITE, *STEPS[2:]], "labels": [True, True, True, True]},
    ]


@pytest.mark.parametrize("written_corrections", [True, False])
def test_the_key_help_lists_w_when_written_corrections_are_on(new_page, live_server, wrong_solution,
                                                             written_corrections):
    phase1(written_corrections=written_corrections)
    user_with_role("rae", "annotator")
    page = new_page()
    log_in(page, live_server, "rae")
    start_labeling(page, live_server)
    page.keyboard.press("?")
    rows = page.locator("dialog#keys tr", has_text="write the step as it should be")
    assert rows.count() == int(written_corrections)
    if written_corrections:
        assert rows.locator("kbd").first.inner_text() == "w"


def given(task) -> list[int]:
    """The ratings the task holds, steps not rated (or undone) left out."""
    return [rating for rating in ratings(task) if rating is not None]


def test_typing_after_w_with_corrections_off_changes_no_label_until_esc(new_page, live_server, wrong_solution):
    """The default project collects no written corrections: `w` says so, and the sentence the
    annotator goes on typing (here "fug": flag, undo, give up) is swallowed, not sent as keys."""
    from annotate.models import Completion

    user_with_role("pia", "annotator")
    page = new_page()
    log_in(page, live_server, "pia")
    task = start_labeling(page, live_server)
    page.keyboard.press("3")
    wait_rating(page, 0, 1)
    page.keyboard.press("3")
    wait_rating(page, 1, 1)
    page.keyboard.press("w")
    page.keyboard.type("fug")
    page.wait_for_timeout(1000)  # time enough for any key that did act to reach the server
    assert given(task) == [1, 1]
    assert not Completion.objects.filter(step_label__annotation=task, flagged=True).exists()
    assert not page.locator("#task details.giveup").evaluate("details => details.open")
    banner = page.locator("#task-error")
    assert banner.is_visible()  # still saying why the keys do nothing
    assert "Written corrections are off in this project" in banner.inner_text()

    page.keyboard.press("Escape")  # the keys act again
    assert not banner.is_visible()
    page.keyboard.press("3")
    wait_rating(page, 2, 1)
    assert given(task) == [1, 1, 1]


def test_undo_goes_one_shown_rating_at_a_time(new_page, live_server, wrong_solution):
    """A `u` pressed again before the last undo showed, or held down, undoes nothing more."""
    user_with_role("uma", "annotator")
    page = new_page()
    log_in(page, live_server, "uma")
    task = start_labeling(page, live_server)
    for index in range(3):
        page.keyboard.press("3")
        wait_rating(page, index, 1)
    page.keyboard.type("uuu")
    page.locator("#task-error", has_text="rating undone").wait_for()
    page.wait_for_timeout(1000)
    assert given(task) == [1, 1]
    page.keyboard.press("u")  # once the undo shows, the next one is the annotator's choice
    page.locator("#step-1:not(.rated)").wait_for()
    assert given(task) == [1]
