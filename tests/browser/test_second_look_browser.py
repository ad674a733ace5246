"""Second look in a real Chromium: after the annotator's own call, where a verifier model's verdict
disagrees, its critique shows beside the model's p, as text; the rating keeps what was shown."""
import pytest

from annotate.labeling import queueing
from annotate.models import AutoLabelRun, AutoStepLabel, LabelingConfig, Project, StepLabel
from tests.browser.test_labeling_browser import log_in, start_labeling, wait_rating
from tests.factories import SolutionFactory, scored_by_current_model, user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
HOSTILE = 'Divides by $x$, which may be 0. <img src=x onerror="window.pwned = 1">'


@pytest.fixture
def judged_pool(transactional_db):
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"assistance": "second_look"})
    solution = SolutionFactory(steps=["Divide both sides by $x$.", "So $x = 3$.", "# Answer\n\n3"])
    scored_by_current_model(solution, [0.9, 0.1, 0.8])  # the model agrees that step 1 is right
    run = AutoLabelRun.objects.create(method=AutoLabelRun.Method.JUDGE, source="tiny-judge")
    AutoStepLabel.objects.bulk_create(AutoStepLabel(run=run, step=step, soft=p, critique=critique) for step, p, critique
                                      in zip(solution.steps.order_by("index"), [0.3, 0.2, 0.9], [HOSTILE, "", ""]))
    queueing.ensure_default_queue()
    return solution


def test_the_judges_critique_appears_after_a_disagreeing_rating_and_is_recorded(new_page, live_server, judged_pool):
    user_with_role("jo", "annotator")
    page = new_page()
    log_in(page, live_server, "jo")
    task = start_labeling(page, live_server)
    critique = page.locator("#second-look-0 .judge-critique")
    assert critique.count() == 0  # nothing of the judge before the annotator's own call
    page.keyboard.press("3")  # good: the judge says bad
    wait_rating(page, 0, 1)
    critique.wait_for()
    assert critique.inner_text() == f"judge: bad, p=0.30 — {HOSTILE}"  # text, not markup
    assert "(model: p=0.90) — look again?" in page.inner_text("#second-look-0")
    assert page.evaluate("window.pwned") is None
    page.keyboard.press("3")  # looked again, kept: the cursor was held on the step
    page.locator("#second-look-0").wait_for(state="detached")
    page.keyboard.press("1")  # step 2 wrong, as the model and the judge say: nothing asked
    wait_rating(page, 1, -1)
    assert page.locator(".second-look-prompt").count() == 0
    seen = StepLabel.objects.get(annotation=task, index=0).assistance
    assert seen == {"mode": "second_look", "model_p": 0.9, "shown": "second_look", "first_rating": 1,
                    "final_rating": 1, "judge_good": False, "judge_p": 0.3, "judge_critique_shown": True,
                    "judge_critique": HOSTILE}
