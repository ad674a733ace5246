"""Wide content stays inside its card in a real Chromium: the models page's table with long model
names, at a laptop's width and a narrow window."""
import pytest

from annotate.models import Project
from scoring.models import ModelVersion
from scoring.store import registry
from tests.browser.test_labeling_browser import log_in
from tests.browser.test_screenshots import eval_metrics
from tests.factories import user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = {"laptop": 1280, "narrow": 800}
# Names as training runs and imports make them: long, some with no hyphen or space to break at.
LONG_NAMES = [
    "qwen2.5-math-7b-instruct-prm-lora-r64-generation-12-human-and-automatic-labels",
    "Qwen2.5-Math-PRM_7B_lora_r64_alpha128_lr2e-5_gen12_human_plus_automatic_labels_v3",
    "smollm2-135m-g2",
]


@pytest.fixture
def long_named_models(transactional_db):
    config = {"head": {"type": "point"}, "backbone": "Qwen/Qwen2.5-Math-7B-Instruct-with-a-long-backbone-name"}
    parent = None
    for name in LONG_NAMES:
        parent = ModelVersion.objects.create(
            name=name, path=f"models/{name}", weights_sha256="3f1c9a0b7e52d4c18a6f" * 3, config=config, parent=parent,
            status=ModelVersion.Status.PROMOTED, metrics=eval_metrics(0.781, 0.612, 0.75) | {"trained_on": {
                "solutions": 240, "step_labels": 1630, "labels": "human", "generation": 12, "head": "point",
                "mode": "lora", "backbone": "Qwen2.5-Math-7B-Instruct"}})
    registry.set_current_model(parent, project=Project.objects.sole())


def overflow_of_cards(page) -> list[dict]:
    """Each card holding a table: how far its content reaches past its right edge, and how far each
    table's visible box (its scrolling wrapper's, when it has one) reaches past the card's."""
    return page.evaluate("""() => [...document.querySelectorAll('.card')].filter(c => c.querySelector('table'))
        .map(card => {
            const right = card.getBoundingClientRect().right;
            const shown = t => {
                for (let e = t; e !== card; e = e.parentElement) {
                    if (['auto', 'scroll'].includes(getComputedStyle(e).overflowX)) return e;
                }
                return t;
            };
            return {
                heading: card.querySelector('h1, h2')?.innerText,
                scrolled: card.scrollWidth - card.clientWidth,
                tables: [...card.querySelectorAll('table')].map(t => shown(t).getBoundingClientRect().right - right),
            };
        })""")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_models_table_stays_inside_its_card(new_page, live_server, long_named_models, width):
    user_with_role("admin", "admin", is_staff=True)
    page = new_page()
    page.set_viewport_size({"width": WIDTHS[width], "height": 800})
    log_in(page, live_server, "admin")
    page.goto(f"{live_server.url}/models/")
    assert page.locator("table tbody tr").count() == len(LONG_NAMES)
    cards = overflow_of_cards(page)
    assert cards and all(card["scrolled"] <= 0 and max(card["tables"]) <= 0 for card in cards), cards
    # Scrolled to its end, the table shows its last column inside the card: nothing is out of reach.
    last_column_past_card = page.evaluate("""() => {
        const table = document.querySelector('.card table'), card = table.closest('.card');
        table.parentElement.scrollLeft = table.parentElement.scrollWidth;
        return table.querySelector('th:last-child').getBoundingClientRect().right - card.getBoundingClientRect().right;
    }""")
    assert last_column_past_card <= 0
