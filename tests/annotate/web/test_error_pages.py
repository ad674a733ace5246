"""403 and 404 answer inside the site's layout (DEBUG off, as pytest-django runs), never bare."""
import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from tests.factories import user_with_role

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


@pytest.fixture
def annotator_client(annotator):
    client = Client()
    client.force_login(annotator)
    return client


def test_an_annotator_opening_an_admin_page_gets_the_styled_403(annotator_client):
    assert settings.DEBUG is False
    response = annotator_client.get(reverse("annotate:import-list"))
    page = response.content.decode()
    assert response.status_code == 403
    assert [t.name for t in response.templates][:2] == ["403.html", "base.html"]
    assert "This page is for the admin role." in page  # the refusal says which role it needs
    assert 'class="topbar"' in page and "css/stepwise.css" in page and ">Label</a>" in page


def test_a_missing_page_gets_the_styled_404_naming_the_path(annotator_client):
    response = annotator_client.get("/no-such-page/<b>x</b>")
    page = response.content.decode()
    assert response.status_code == 404
    assert [t.name for t in response.templates][:2] == ["404.html", "base.html"]
    assert "<code>/no-such-page/" in page and "<b>x</b>" not in page  # the path, never as markup
    assert 'class="topbar"' in page


def test_another_annotators_task_is_a_styled_404_too(annotator_client, django_user_model):
    user_with_role("other", "annotator")
    response = annotator_client.get(reverse("annotate:label-task", args=[987654]))
    assert response.status_code == 404
    assert "There is nothing here" in response.content.decode()


def test_a_logged_out_visitor_gets_the_404_without_a_menu(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert "There is nothing here" in response.content.decode() and "Log out" not in response.content.decode()
