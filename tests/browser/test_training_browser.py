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



# Losses as training logs them: from a large first epoch down, near ln 2, and very small.
LOSS_CURVES = {
    "from 12.5 down to 0.0123": [(12.5, 11.8), (0.6931, 0.7012), (0.0123, 0.0456)],
    "near ln 2": [(0.6931, 0.6932), (0.6925, 0.6930)],
    "very small": [(0.0123, 0.0131), (0.00042, 0.00097)],
}


@pytest.mark.parametrize("losses", LOSS_CURVES)
def test_the_loss_charts_axis_labels_stay_clear_of_its_tick_labels(new_page, live_server, losses):
    user_with_role("boss", "admin", is_staff=True)
    curve = [{"epoch": epoch, "train_loss": train, "val_loss": val}
             for epoch, (train, val) in enumerate(LOSS_CURVES[losses], start=1)]
    run = TrainingRun.objects.create(state=JobState.SUCCEEDED, active_slot=None, done=1, total=1, loss_curve=curve)
    page = new_page()
    page.goto(f"{live_server.url}/accounts/login/?next=/models/jobs/training/{run.pk}/")
    page.fill("#id_username", "boss")
    page.fill("#id_password", "pass-for-tests")
    page.press("#id_password", "Enter")
    chart = page.locator("#job-progress svg")
    chart.locator("polyline").first.wait_for()

    def boxes(selector: str) -> list[tuple[str, dict]]:
        return [(text.text_content(), text.bounding_box()) for text in chart.locator(selector).all()]

    (_, y_label), = boxes("text.y-label")
    (_, x_label), = boxes("text.x-label")
    y_ticks, x_ticks = boxes("text.y-tick"), boxes("text.x-tick")
    assert len(y_ticks) == 3 and len(x_ticks) == len(curve)
    # Whatever its height, the y label cannot reach a tick label: it is left of all of them.
    reached = [tick for tick, box in y_ticks if box["x"] < y_label["x"] + y_label["width"]]
    assert not reached, f"the y axis's label {y_label} reaches the tick labels {reached}: {y_ticks}"
    assert y_label["x"] >= chart.bounding_box()["x"]  # and the chart's edge does not cut it
    reached = [tick for tick, box in x_ticks if x_label["y"] < box["y"] + box["height"]]
    assert not reached, f"the x axis's label {x_label} reaches the tick labels {reached}: {x_ticks}"
