"""The training run page in a real Chromium: htmx polls the run's progress until it finishes."""
import pytest

from jobs.states import JobState
from scoring.models import TrainingRun
from tests.factories import user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_run_page_follows_progress_and_draws_the_loss_curve_without_reload(new_page, live_server):
    user_with_role("boss", "admin", is_staff=True)
    run = TrainingRun.objects.create(state=JobState.RUNNING, done=1, total=4, log="12:00:00 features 8/8\n")
    page = new_page()
    page.goto(f"{live_server.url}/accounts/login/?next=/models/jobs/training/{run.pk}/")
    page.fill("#id_username", "boss")
    page.fill("#id_password", "pass-for-tests")
    page.press("#id_password", "Enter")
    page.locator("#job-progress .state", has_text="running").wait_for()
    assert page.locator("#job-progress svg").count() == 0  # no loss yet
    page.evaluate("window.marker = 'same page'")

    TrainingRun.objects.filter(pk=run.pk).update(done=2, loss_curve=[
        {"epoch": 1, "train_loss": 0.69, "val_loss": 0.7}, {"epoch": 2, "train_loss": 0.5, "val_loss": 0.6}])
    page.locator("#job-progress svg polyline").first.wait_for()
    assert page.locator("#job-progress progress").get_attribute("value") == "50"

    TrainingRun.objects.filter(pk=run.pk).update(state=JobState.SUCCEEDED, done=4, active_slot=None,
                                                 log="12:00:00 features 8/8\n12:00:05 epoch 2: done\n")
    page.locator("#job-progress .state", has_text="succeeded").wait_for()
    assert "epoch 2: done" in page.locator("pre.log").inner_text()
    assert page.evaluate("window.marker") == "same page"  # swapped in place, never reloaded
    assert page.locator("#job-progress").get_attribute("hx-trigger") is None  # polling stopped
