"""The labeling screen without snags, in a real Chromium: a lost lease says so and offers the next
task, the "Submitted as" notice never covers a step, a long [asy] picture opens on a few lines,
and no page an annotator or a reviewer reaches logs an error or fails a request."""
import re
from urllib.parse import urldefrag, urlparse

import pytest

from annotate.labeling import queueing
from annotate.models import Annotation, QueueItem
from tests.browser.test_labeling_browser import log_in, start_labeling, wait_rating
from tests.factories import ProblemFactory, SolutionFactory, user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ASY = "[asy]\n" + "\n".join(f"draw(({n},0)--({n},{n}));  // post {n} of the fence" for n in range(40)) + "\n[/asy]"


@pytest.fixture
def pool(transactional_db):
    problem = ProblemFactory(statement="A fence has 40 posts, drawn below. How many gaps are there between them?",
                             ground_truth_answer="39")
    steps = [f"Here is the fence:\n\n{ASY}", "Between 40 posts there are $40 - 1 = 39$ gaps.", "# Answer\n\n39"]
    solutions = [SolutionFactory(problem=problem, steps=steps) for _ in range(3)]
    queueing.ensure_default_queue()
    return solutions


def rate_and_submit(page, count=3):
    for index in range(count):
        page.keyboard.press("3")
        wait_rating(page, index, 1)
    page.keyboard.press("Enter")


def overlaps(a, b) -> bool:
    return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] \
        and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


@pytest.mark.parametrize("width", [360, 768, 1280])
def test_the_submitted_notice_never_covers_a_step(new_page, live_server, pool, artifacts, width):
    user_with_role("tia", "annotator")
    page = new_page()
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, live_server, "tia")
    first = start_labeling(page, live_server)
    rate_and_submit(page)
    page.wait_for_url(lambda url: bool(re.search(r"/label/\d+/$", url)) and not url.endswith(f"/{first.pk}/"))
    notice = page.locator(".messages .toast")
    notice.wait_for()
    page.locator("#step-0.cursor").wait_for()
    page.screenshot(path=str(artifacts / f"submitted-notice-{width}.png"))
    toast = notice.bounding_box()
    assert toast and "Submitted as solution" in notice.inner_text()
    for step in page.locator(".step").all():
        box = step.bounding_box()
        where = step.get_attribute("id")
        assert box and not overlaps(toast, box), f"at {width} px the notice {toast} covers {where} {box}"


def test_a_long_asy_picture_opens_on_a_few_lines_and_show_all_opens_it(new_page, live_server, pool):
    user_with_role("ada", "annotator")
    page = new_page()
    page.set_viewport_size({"width": 768, "height": 800})
    log_in(page, live_server, "ada")
    start_labeling(page, live_server)
    picture = page.locator("#step-0 .codeblock pre")
    collapsed = picture.bounding_box()
    assert collapsed and collapsed["height"] < 200, collapsed  # a few lines, not the 40
    show = page.locator("#step-0 .codeblock summary")
    assert show.inner_text() == "Show all 40 lines"
    show.click()
    expanded = picture.bounding_box()
    assert expanded and expanded["height"] > 3 * collapsed["height"]
    assert page.evaluate("(pre) => pre.scrollHeight <= pre.clientHeight", picture.element_handle())
    assert show.inner_text() == "Show less"
    show.click()
    assert picture.bounding_box()["height"] == pytest.approx(collapsed["height"], abs=1)


def test_a_lease_lost_in_a_heartbeat_says_so_and_offers_the_next_task(new_page, live_server, pool):
    annotator = user_with_role("lee", "annotator")
    someone = user_with_role("sol", "annotator")
    page = new_page()
    page.clock.install()  # the heartbeat runs every 30 s: the test moves the page's clock on
    log_in(page, live_server, "lee")
    task = start_labeling(page, live_server)
    # The lease lapsed and the item went to someone else.
    QueueItem.objects.filter(pk=task.queue_item_id).update(leased_to=someone)
    with page.expect_response(lambda r: r.url.endswith("/heartbeat")) as answer:
        page.mouse.move(10, 10)  # active, so the heartbeat goes
        page.clock.run_for(31_000)
    assert answer.value.status == 409
    notice = page.locator("#task-lost")
    notice.wait_for()
    assert "went to someone else" in notice.inner_text()
    assert not page.locator("#submit-form").is_visible()
    page.keyboard.press("3")  # the steps are no longer this page's to rate
    page.keyboard.press("Enter")  # the next task
    page.wait_for_url(lambda url: bool(re.search(r"/label/\d+/$", url)) and not url.endswith(f"/{task.pk}/"))
    page.locator("#step-0.cursor").wait_for()
    mine = Annotation.objects.get(annotator=annotator)
    assert mine.pk != task.pk and mine.queue_item_id != task.queue_item_id


class Watch:
    """Every console error, script error and failed or refused request a page makes."""

    def __init__(self, page):
        self.problems: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text} ({page.url})"))
        page.on("pageerror", lambda e: self.problems.append(f"script: {e} ({page.url})"))
        page.on("requestfailed", lambda r: self.failed(r, page))
        page.on("response", lambda r: r.status >= 400 and self.problems.append(f"{r.status}: {r.url} ({page.url})"))


    def failed(self, request, page) -> None:
        # Leaving a task sends its last heartbeat with keepalive, which outlives the page: the
        # browser carries it on, while the page that sent it reports it cut off.
        if request.url.endswith("/heartbeat") and request.failure == "net::ERR_ABORTED":
            return
        self.problems.append(f"failed: {request.url} {request.failure} ({page.url})")


SKIP = re.compile(r"^/(admin|api|accounts/logout)|/download$|/report$")


def crawl(page, live_server, limit=40) -> list[str]:
    """Visit every page of the site linked from home, breadth first: the paths visited."""
    origin = urlparse(live_server.url).netloc
    queue, seen = [f"{live_server.url}/"], set()
    while queue and len(seen) < limit:
        url = queue.pop(0)
        if url in seen:
            continue
        seen.add(url)
        page.goto(url)
        page.wait_for_load_state("networkidle")
        for href in page.eval_on_selector_all("a[href]", "(links) => links.map((a) => a.href)"):
            target = urldefrag(href)[0]
            parsed = urlparse(target)
            if parsed.netloc == origin and not SKIP.search(parsed.path) and target not in seen:
                queue.append(target)
    return sorted(urlparse(url).path for url in seen)


def test_no_page_an_annotator_or_reviewer_reaches_logs_an_error_or_fails_a_request(new_page, live_server, pool):
    user_with_role("ann", "annotator")
    user_with_role("rex", "reviewer")
    page = new_page()
    watch = Watch(page)
    log_in(page, live_server, "ann")
    start_labeling(page, live_server)
    page.locator("#step-0 .codeblock summary").click()
    rate_and_submit(page)  # the next task, with its notice
    page.locator(".messages .toast").wait_for()
    page.locator("#step-0.cursor").wait_for()
    visited = crawl(page, live_server)
    assert {"/", "/label/"} <= set(visited)
    reviewer = new_page()
    watch_reviewer = Watch(reviewer)
    log_in(reviewer, live_server, "rex")
    visited = crawl(reviewer, live_server)
    assert "/review/" in visited and "/quality/" in visited
    assert any(re.fullmatch(r"/review/\d+/", path) for path in visited)  # the submitted annotation
    assert watch.problems + watch_reviewer.problems == []
