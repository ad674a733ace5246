"""Hostile content everywhere it is shown: script tags, event handlers, javascript:
URLs, SVG, Django template syntax and KaTeX tricks in a problem, its steps, a human
completion, a finish note, a queue reason and a username (the pool imported from a file, as an
admin's upload is), rendered on every page that shows
them (labeling, review, queue, Django admin, exports, the browsable API, Swagger UI) in
Chromium. On each page: no dialog opened, no element injected, no script ran, no CSP
violation (which would mean something tried to run)."""
import json
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from annotate.labeling import actions as labeling
from annotate.labeling import queueing
from annotate.models import ExportJob, LabelingConfig, Project, QueueItem, Solution, StepLabel
from annotate.pool import exporting, importing
from tests.browser.test_csp import violations, watch_csp
from tests.browser.test_labeling_browser import PASSWORD, start_labeling
from tests.factories import user_with_role
from tests.sources_fixtures import judge_labels

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
REPO_ROOT = Path(__file__).resolve().parent.parent.parent

# Each tries to run `window.pwned = 1` / alert(), or to leave an element marked pwned.
HTML_PAYLOADS = [
    "<script>window.pwned = 1; alert(1)</script>",
    '<img src="x" data-pwned onerror="window.pwned = 1; alert(1)">',
    '<svg data-pwned onload="alert(1)"><circle r="1"/></svg>',
    '<a data-pwned href="javascript:alert(1)">click</a>',
    '"><img src=x data-pwned onerror=alert(1)>',
    "'><svg/onload=alert(1) data-pwned>",
    '<iframe data-pwned src="javascript:alert(1)"></iframe>',
    "<math><mtext><table><mglyph><style><img src=x data-pwned onerror=alert(1)>",
    "[link](javascript:alert(1)) **<b data-pwned>bold</b>**",
    "</textarea></script><script>alert(1)</script>",
]
TEMPLATE_PAYLOAD = "{{ 7|add:7 }} {% now 'Y' %} {% load static %}"
KATEX_PAYLOADS = [
    r"$\href{javascript:alert(1)}{click me}$",
    r"$\url{javascript:alert(1)}$",
    r"$\htmlClass{pwned}{x}$ and $\htmlId{pwned}{y}$",
    r"$\htmlData{pwned=1}{z}$ $\htmlStyle{background:url(javascript:alert(1))}{w}$",
    r"$\includegraphics[height=1em]{/static/pwn.png}$",
    r"$$\href{javascript:alert(1)}{\text{display}}$$",
]
CORPUS = HTML_PAYLOADS + [TEMPLATE_PAYLOAD] + KATEX_PAYLOADS
HOSTILE_NAME = '<img src=x data-pwned onerror=alert(1)>'
HOSTILE_REASON = '<svg data-pwned onload=alert(1)>'
INJECTED = ("[data-pwned], .pwned, #pwned, [data-pwned='1'], a[href^='javascript' i], iframe, object, embed, "
            "img[src='x'], img[src*='pwn']")


@pytest.fixture
def hostile_pool(transactional_db, tmp_path):
    """The corpus in every field of an imported file (the path an admin's upload takes): problem,
    answer, steps, source, generator and meta, through `import_pool` and its grading."""
    config = LabelingConfig.of(Project.objects.sole())
    config.allow_human_completion = True
    config.qc_rate = 0
    config.save()
    line = {"problem": "Solve it. " + " ".join(CORPUS), "ground_truth_answer": "<b data-pwned>7</b>",
            "source": HOSTILE_NAME, "generator": HOSTILE_REASON, "meta": {"note": HTML_PAYLOADS[0]}}
    first = {**line, "steps": CORPUS + ["# Answer\n\n<script>alert(1)</script>"]}
    waiting = {**line, "steps": list(reversed(CORPUS))}  # still waiting in the queue at the end
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(json.dumps(each) + "\n" for each in (first, waiting)))
    summary = importing.import_pool(path=path, format="generic")
    assert (summary.created, summary.errors) == (2, 0), summary.first_errors
    queueing.ensure_default_queue()
    QueueItem.objects.update(reason=HOSTILE_REASON)
    return Solution.objects.get(steps__index=0, steps__text=CORPUS[0])


class Watched:
    """One browser page, with every dialog and CSP report it sees recorded."""

    def __init__(self, page):
        self.page = page
        self.dialogs: list[str] = []
        self.reports = watch_csp(page)
        page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))

    def log_in(self, live_server, username: str) -> None:
        self.page.goto(f"{live_server.url}/accounts/login/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", PASSWORD)
        self.page.press("#id_password", "Enter")
        self.page.wait_for_url(f"{live_server.url}/")

    def visit(self, url: str, ready: str = "main, #content, body") -> None:
        self.page.goto(url)
        self.page.locator(ready).first.wait_for()
        self.page.wait_for_load_state("load")
        self.page.wait_for_timeout(300)  # deferred scripts (KaTeX, htmx's first swaps) have run
        self.assert_nothing_ran(url)

    def assert_nothing_ran(self, where: str) -> None:
        assert self.dialogs == [], where
        assert self.page.evaluate("window.pwned") is None, where
        assert self.page.locator(INJECTED).count() == 0, (where, self.page.locator(INJECTED).first.evaluate(
            "e => e.outerHTML"))
        assert violations(self.page, self.reports) == [], where


def test_katex_runs_with_trust_off():
    assert "trust: false" in (REPO_ROOT / "static" / "js" / "math.js").read_text()


def test_hostile_content_runs_nowhere(new_page, live_server, hostile_pool):
    hostile = user_with_role(HOSTILE_NAME, "annotator")
    user_with_role("boss", "admin", is_staff=True, is_superuser=True)

    # Labeling: the problem, every step and the answer, rendered with KaTeX, and an htmx save.
    annotator = Watched(new_page())
    annotator.log_in(live_server, HOSTILE_NAME)
    annotation = start_labeling(annotator.page, live_server)
    annotator.page.locator(".steps .math[data-rendered]").first.wait_for()
    annotator.assert_nothing_ran("labeling page")
    text = annotator.page.inner_text("main")
    assert "{{ 7|add:7 }}" in text and "{% now 'Y' %}" in text  # shown as written, never evaluated
    assert "<script>window.pwned = 1; alert(1)</script>" in text
    annotator.page.keyboard.press("3")
    annotator.page.locator("#step-0[data-rating='1']").wait_for()
    annotator.assert_nothing_ran("labeling page after an htmx swap")

    # A wrong step rewritten with the corpus, and a finish note, by the hostile annotator.
    labeling.rate(annotation=annotation, index=1, rating=-1)
    labeling.write_completion(annotation=annotation, index=1, text=HTML_PAYLOADS[1] + KATEX_PAYLOADS[0])
    labeling.submit(annotation=annotation, finish_reason="give_up", note=" ".join(HTML_PAYLOADS[:4]))
    assert StepLabel.objects.get(annotation=annotation, index=1).human_completion
    job = ExportJob.objects.create(format="prm800k", options=exporting.ExportOptions.from_dict({}).to_dict())
    exporting.run_export_job(job_id=job.pk)
    # A judge's critiques: a short one shown whole, a long one folded; the judge disagrees at step 1.
    judge_labels(annotation.solution, [(0.1, HTML_PAYLOADS[0]), (0.9, " ".join(HTML_PAYLOADS + KATEX_PAYLOADS))])

    admin = Watched(new_page())
    admin.log_in(live_server, "boss")
    base = live_server.url
    pages = [
        f"{base}/", f"{base}/review/", f"{base}/review/{annotation.pk}/", f"{base}/quality/",
        f"{base}/models/queue/", f"{base}/exports/", f"{base}/jobs/export/{job.pk}/",
        f"{base}/admin/annotate/problem/", f"{base}/admin/annotate/solution/",
        f"{base}/admin/annotate/solution/{hostile_pool.pk}/change/", f"{base}/admin/annotate/annotation/",
        f"{base}/admin/annotate/annotation/{annotation.pk}/change/", f"{base}/admin/annotate/completion/",
        f"{base}/admin/annotate/queueitem/", f"{base}/admin/auth/user/", f"{base}/admin/auth/user/{hostile.pk}/change/",
        f"{base}/api/annotations?format=api", f"{base}/api/annotations/{annotation.pk}?format=api",
        f"{base}/api/solutions?format=api", f"{base}/api/problems?format=api", f"{base}/models/sources/",
        f"{base}/api/solutions/{annotation.solution_id}/sources?format=api",
    ]
    for url in pages:
        admin.visit(url)
    admin.visit(f"{base}/api/docs/", ready=".swagger-ui .opblock")
    # Where the corpus should be visible, it is there as text.
    admin.page.goto(f"{base}/review/{annotation.pk}/")
    assert HOSTILE_NAME in admin.page.inner_text("main")
    assert HTML_PAYLOADS[0] in admin.page.inner_text("main")
    assert HTML_PAYLOADS[0] in admin.page.inner_text(".source-judge")
    admin.page.goto(f"{base}/models/queue/")
    assert HOSTILE_REASON in admin.page.inner_text("main")

    # The export itself is a download, never a page: attachment, and no content sniffing.
    client = Client()
    client.force_login(get_user_model().objects.get(username="boss"))
    download = client.get(f"/jobs/export/{job.pk}/download")
    assert download.status_code == 200
    assert download["Content-Disposition"].startswith("attachment")
    assert download["X-Content-Type-Options"] == "nosniff"
    assert b"<script>" in b"".join(download.streaming_content)  # the data kept as written
