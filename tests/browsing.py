"""Playwright (sync API) driving Debian's Chromium against Django's live server: fixtures every test
directory shares through tests/conftest.py, so the whole run has one Playwright and one browser."""
import os
import time
from pathlib import Path

import pytest

from tests import ci

# Playwright's sync API runs an event loop in this thread; Django's ORM would refuse.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(scope="session")
def browser():
    playwright_api = pytest.importorskip("playwright.sync_api")
    if not Path(ci.CHROMIUM).exists():
        pytest.skip(f"no Chromium at {ci.CHROMIUM} (apt-get install -y chromium); under CI=true this fails")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=ci.CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def new_page(browser, transactional_db):
    """Pages in fresh browser contexts (separate cookies), closed after the test.

    It depends on the database fixture so that it is torn down first: a page left open
    keeps sending heartbeats, and a write racing the flush between tests deadlocks it.
    """
    contexts = []

    def make():
        ci.uses("browser")
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        # Script errors show in the test's output, so a failure says why.
        page.on("pageerror", lambda error: print(f"page error: {error}"))
        page.on("console", lambda message: message.type == "error" and print(f"console: {message.text}"))
        return page

    yield make
    for context in contexts:
        for page in context.pages:
            page.goto("about:blank")  # stops the page's timers before anything else
        context.close()
    # Let the server finish a request that was already in flight when the pages closed.
    time.sleep(0.5)


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
