"""The enforced Content-Security-Policy in a real Chromium: KaTeX renders, htmx saves, the
queue's generation picker submits, Swagger UI and the admin run, and nothing is blocked.

A violation is collected two ways: the page's securitypolicyviolation events (installed
before any page script runs) and Chromium's console errors naming the policy.
"""
import re

import pytest

from annotate.labeling import queueing
from annotate.models import Generation, StepLabel
from tests.browser.test_labeling_browser import log_in, start_labeling, wait_rating
from tests.factories import ProblemFactory, SolutionFactory, user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

COLLECT_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cspViolations.push(e.violatedDirective + " blocked " + (e.blockedURI || "inline") + " at " + e.sourceFile
                              + ":" + e.lineNumber);
});
"""


def watch_csp(page) -> list[str]:
    """Install the collectors on a fresh page; the returned list gathers console reports."""
    page.context.add_init_script(COLLECT_VIOLATIONS)
    reports: list[str] = []
    page.on("console", lambda m: "Content Security Policy" in m.text and reports.append(m.text))
    return reports


def violations(page, reports: list[str]) -> list[str]:
    return reports + (page.evaluate("window.__cspViolations || []") or [])


@pytest.fixture
def math_pool(transactional_db):
    problem = ProblemFactory(statement="Find $x$ if $\\frac{x}{2} = 3$.", ground_truth_answer="6")
    solution = SolutionFactory(problem=problem, steps=["Multiply by $2$: $x = 2 \\cdot 3$.", "So $x = 6$.",
                                                       "# Answer\n\n6"])
    queueing.ensure_default_queue()
    return solution


def test_katex_and_htmx_work_under_the_csp_with_no_violation(new_page, live_server, math_pool):
    user_with_role("kim", "annotator")
    page = new_page()
    reports = watch_csp(page)
    log_in(page, live_server, "kim")
    annotation = start_labeling(page, live_server)
    page.locator(".steps .katex").first.wait_for()
    assert page.locator(".problem .katex").count() >= 1
    # base.html's htmx-config reached htmx: own origin only, no eval, no injected <style>.
    assert page.evaluate("[htmx.config.selfRequestsOnly, htmx.config.allowEval, htmx.config.includeIndicatorStyles,"
                         " document.querySelectorAll('style').length]") == [True, False, False, 0]
    assert page.locator(".math[data-rendered='error']").count() == 0
    page.keyboard.press("3")  # an htmx POST, swapped in
    wait_rating(page, 0, 1)
    assert StepLabel.objects.get(annotation=annotation, index=0).completions.get().rating == 1
    assert page.locator(".steps .katex").count() >= 2  # the swapped-in steps rendered too
    assert violations(page, reports) == []


def test_the_queue_picker_swagger_ui_and_the_admin_run_with_no_violation(new_page, live_server, math_pool):
    Generation.objects.get_or_create(number=0)
    Generation.objects.create(number=1)
    user_with_role("boss", "admin", is_staff=True, is_superuser=True)
    page = new_page()
    reports = watch_csp(page)
    log_in(page, live_server, "boss")

    page.goto(f"{live_server.url}/models/queue/?generation=1")
    page.select_option("#generation", "0")  # static/js/forms.js submits on change
    page.wait_for_url(re.compile(r"generation=0"))
    assert violations(page, reports) == []

    page.goto(f"{live_server.url}/api/docs/")
    page.locator(".swagger-ui .opblock").first.wait_for()  # the split view's script ran
    assert violations(page, reports) == []

    page.goto(f"{live_server.url}/admin/annotate/solution/")
    page.locator("#result_list").wait_for()
    assert violations(page, reports) == []
    page.goto(f"{live_server.url}/api/annotations?format=api")
    page.locator(".response-info").wait_for()
    assert violations(page, reports) == []
