"""Accounts come from admins: the add_user command."""
import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse

from annotate.labeling import roles

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_add_user_creates_a_user_with_the_role_and_a_working_password(client):
    out = io.StringIO()
    call_command("add_user", "dana", role="reviewer", stdout=out)
    password = out.getvalue().split("password: ")[1].strip()
    user = get_user_model().objects.get(username="dana")
    assert roles.is_reviewer(user) and not roles.is_admin(user)
    assert client.post(reverse("login"), {"username": "dana", "password": password}).status_code == 302


def test_add_user_refuses_an_existing_name():
    call_command("add_user", "eve", role="annotator", stdout=io.StringIO())
    with pytest.raises(CommandError, match="already exists"):
        call_command("add_user", "eve", role="admin", stdout=io.StringIO())


def test_an_admin_from_add_user_can_use_the_django_admin(client):
    out = io.StringIO()
    call_command("add_user", "ada", role="admin", stdout=out)
    password = out.getvalue().split("password: ")[1].strip()
    assert client.post("/admin/login/", {"username": "ada", "password": password, "next": "/admin/"}).status_code == 302
    index = client.get("/admin/")
    assert index.status_code == 200 and "permission to view or edit anything" not in index.content.decode()
    # The project's models and the retrain schedule the README sends admins to edit.
    assert client.get(reverse("admin:annotate_solution_changelist")).status_code == 200
    assert client.get(reverse("admin:django_celery_beat_periodictask_changelist")).status_code == 200


@pytest.mark.parametrize("role", ["annotator", "reviewer"])
def test_annotators_and_reviewers_get_no_django_admin(client, role):
    out = io.StringIO()
    call_command("add_user", "sam", role=role, stdout=out)
    password = out.getvalue().split("password: ")[1].strip()
    assert client.post(reverse("login"), {"username": "sam", "password": password}).status_code == 302
    assert client.get(reverse("admin:annotate_solution_changelist")).status_code == 302  # to the admin login
