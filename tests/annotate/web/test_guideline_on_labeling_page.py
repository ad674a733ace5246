"""Annotators read the project's guideline, and its version, from the labeling pages: folded,
escaped, line breaks kept, and read with the project the request already has (no query)."""
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotate.labeling import queueing
from annotate.models import Project
from tests.factories import SolutionFactory, user_with_role

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

GUIDELINE = "Rate each step on its own.\nA step that <b>guesses</b> is −1, even if it is right: $x^2$."


@pytest.fixture
def annotator(db):
    return user_with_role("ann", "annotator")


@pytest.fixture
def task(annotator):
    SolutionFactory(steps=["Let $x = 2$.", "So 2x = 4.", "# Answer\n\n4"])
    queueing.ensure_default_queue()
    return queueing.claim_next(annotator=annotator)


def with_guideline(text: str, version: int = 3) -> Project:
    project = Project.objects.sole()
    project.guideline, project.guideline_version = text, version
    project.save()  # saved, not updated: the pages' memo of the project hears of it
    return project


def page(user, name: str, *args) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(reverse(name, args=args))
    assert response.status_code == 200
    return response.content.decode()


def test_the_task_page_shows_the_guideline_folded_with_its_version(annotator, task):
    with_guideline(GUIDELINE)
    html = page(annotator, "annotate:label-task", task.pk)
    assert '<details class="guideline card">' in html and "<summary>Guideline (version 3)</summary>" in html
    # Line breaks kept, math typeset as the problem's is.
    assert "Rate each step on its own.<br>" in html and '<span class="math" data-display="false">x^2</span>' in html


def test_html_in_a_guideline_is_escaped(annotator, task):
    with_guideline(GUIDELINE)
    html = page(annotator, "annotate:label-task", task.pk)
    assert "A step that &lt;b&gt;guesses&lt;/b&gt; is −1" in html and "<b>guesses" not in html


def test_without_a_guideline_there_is_no_guideline_element(annotator, task):
    with_guideline("")
    assert "guideline" not in page(annotator, "annotate:label-task", task.pk).lower()


def test_the_page_between_tasks_shows_it_too_when_there_is_one(annotator):
    with_guideline("")
    assert "guideline" not in page(annotator, "annotate:label-start").lower()
    with_guideline(GUIDELINE, version=7)
    html = page(annotator, "annotate:label-start")
    assert "<summary>Guideline (version 7)</summary>" in html and "&lt;b&gt;guesses" in html
    assert "katex.min.js" in html  # its math typeset


def test_showing_the_guideline_costs_no_query(annotator, task):
    client = Client()
    client.force_login(annotator)
    url = reverse("annotate:label-task", args=[task.pk])
    with_guideline("")
    client.get(url)
    with CaptureQueriesContext(connection) as without:
        client.get(url)
    with_guideline(GUIDELINE)
    client.get(url)
    with CaptureQueriesContext(connection) as shown:
        assert "Guideline (version 3)" in client.get(url).content.decode()
    assert len(shown) == len(without)
