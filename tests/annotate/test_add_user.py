"""Accounts come from admins: the add_user command."""
import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from annotate import roles

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_add_user_creates_a_user_with_the_role_and_a_working_password(client):
    out = io.StringIO()
    call_command("add_user", "dana", role="reviewer", stdout=out)
    password = out.getvalue().split("password: ")[1].strip()
    user = get_user_model().objects.get(username="dana")
    assert roles.is_reviewer(user) and not roles.is_admin(user)
    assert client.login(username="dana", password=password)


def test_add_user_refuses_an_existing_name():
    call_command("add_user", "eve", role="annotator", stdout=io.StringIO())
    with pytest.raises(CommandError, match="already exists"):
        call_command("add_user", "eve", role="admin", stdout=io.StringIO())
