"""A project's members page: its admins add existing users in a role, change a member's role and
remove members; each change takes effect at once and is recorded with the settings changes; a
project is never left without a project admin by one of its own admins; nothing reaches another
project's members."""
import io

import pytest
from django.core.management import call_command
from django.test import Client

from annotate.labeling import roles
from annotate.models import Membership, Project, SettingsChange
from tests.factories import UserFactory, user_with_role

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

MEMBERS = "/p/alpha/members/"


def client_for(user, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


@pytest.fixture
def alpha(db):
    return Project.objects.create(slug="alpha", name="Alpha")


@pytest.fixture
def beta(db):
    return Project.objects.create(slug="beta", name="Beta")


@pytest.fixture
def ada(alpha):
    """Alpha's project admin."""
    return user_with_role("ada", roles.ADMIN, alpha)


@pytest.fixture
def dana(db):
    """An account that belongs to no project yet."""
    return UserFactory(username="dana")


def role_of(user, project) -> str | None:
    return Membership.objects.filter(user=user, project=project).values_list("role", flat=True).first()


def recorded(project) -> list[tuple[str, str, str, str]]:
    """The project's recorded changes, oldest first: (who, field, from, to)."""
    changes = SettingsChange.objects.filter(project=project).order_by("id")
    return [(change.user.username if change.user else "", change.field, change.old_value, change.new_value)
            for change in changes]


def test_an_admin_adds_re_roles_and_removes_a_member_and_each_change_takes_effect(alpha, ada, dana):
    admin, person = client_for(ada), client_for(dana)
    assert person.get("/p/alpha/label/").status_code == 404

    added = admin.post(MEMBERS, {"username": "dana", "role": "annotator"})
    assert added.status_code == 302 and added["Location"] == MEMBERS
    assert person.get("/p/alpha/label/").status_code == 200
    assert person.get("/p/alpha/review/").status_code == 403
    page = admin.get(MEMBERS).content.decode()
    assert "Added dana as annotator." in page and "<td>dana</td>" in page

    assert admin.post(f"{MEMBERS}{dana.pk}/role", {"role": "reviewer"}).status_code == 302
    assert role_of(dana, alpha) == "reviewer" and person.get("/p/alpha/review/").status_code == 200

    assert admin.post(f"{MEMBERS}{dana.pk}/remove").status_code == 302
    assert role_of(dana, alpha) is None
    assert person.get("/p/alpha/label/").status_code == 404
    assert recorded(alpha) == [
        ("ada", "member", "", "dana as annotator"),
        ("ada", "member", "dana as annotator", "dana as reviewer"),
        ("ada", "member", "dana as reviewer", ""),
    ]


def test_adding_someone_who_is_already_a_member_gives_them_the_new_role(alpha, ada, dana):
    roles.grant_role(dana, roles.ANNOTATOR, alpha)
    response = client_for(ada).post(MEMBERS, {"username": "dana", "role": "admin"})
    assert response.status_code == 302
    assert Membership.objects.filter(user=dana, project=alpha).count() == 1 and role_of(dana, alpha) == "admin"
    assert recorded(alpha) == [("ada", "member", "dana as annotator", "dana as project admin")]


def test_the_settings_page_and_an_admins_top_bar_link_the_members_page(alpha, ada, dana):
    roles.grant_role(dana, roles.ANNOTATOR, alpha)
    assert f'href="{MEMBERS}"' in client_for(ada).get("/p/alpha/settings/").content.decode()
    assert f'href="{MEMBERS}"' in client_for(ada).get("/p/alpha/label/").content.decode()
    assert f'href="{MEMBERS}"' not in client_for(dana).get("/p/alpha/label/").content.decode()


def test_both_pages_list_the_recorded_changes_the_settings_page_naming_the_setting(alpha, ada, dana):
    from annotate.labeling import projects

    projects.change_settings(project=alpha, user=ada, values={"qc_rate": 0.25})
    client_for(ada).post(MEMBERS, {"username": "dana", "role": "reviewer"})
    settings_page = client_for(ada).get("/p/alpha/settings/").content.decode()
    assert "<th>Setting</th>" in settings_page and "<td>qc_rate</td>" in settings_page
    members_page = client_for(ada).get(MEMBERS).content.decode()
    assert "<th>Setting</th>" not in members_page and "<td>dana as reviewer</td>" in members_page


@pytest.mark.parametrize(("data", "error"), [
    ({"username": "nobody", "role": "annotator"}, "Username: no user named &#x27;nobody&#x27;"),
    ({"username": "dana", "role": "boss"},
     "Role: &#x27;boss&#x27; is not a role; the roles are: annotator, reviewer, admin"),
    ({"role": "annotator"}, "Username: This field is required."),
    ({}, "Role: This field is required."),
])
def test_adding_with_bad_input_answers_400_naming_the_field_and_changes_nothing(alpha, ada, dana, data, error):
    response = client_for(ada).post(MEMBERS, data)
    assert response.status_code == 400 and error in response.content.decode()
    assert role_of(dana, alpha) is None and recorded(alpha) == []


def test_an_unknown_role_for_a_member_answers_400_naming_the_field_and_changes_nothing(alpha, ada, dana):
    roles.grant_role(dana, roles.ANNOTATOR, alpha)
    response = client_for(ada).post(f"{MEMBERS}{dana.pk}/role", {"role": "owner"})
    assert response.status_code == 400
    assert "Role of dana: &#x27;owner&#x27; is not a role" in response.content.decode()
    assert role_of(dana, alpha) == "annotator" and recorded(alpha) == []


@pytest.mark.parametrize("role", [roles.ANNOTATOR, roles.REVIEWER])
def test_annotators_and_reviewers_of_the_project_get_403(alpha, dana, role):
    roles.grant_role(dana, role, alpha)
    other = user_with_role("otto", roles.ANNOTATOR, alpha)
    person = client_for(dana)
    assert person.get(MEMBERS).status_code == 403
    assert person.post(MEMBERS, {"username": "dana", "role": "admin"}).status_code == 403
    assert person.post(f"{MEMBERS}{other.pk}/role", {"role": "reviewer"}).status_code == 403
    assert person.post(f"{MEMBERS}{other.pk}/remove").status_code == 403
    assert (role_of(dana, alpha), role_of(other, alpha), recorded(alpha)) == (role, "annotator", [])


def test_a_non_member_gets_404_and_a_site_admin_who_is_no_member_gets_the_page(alpha, ada, dana):
    assert client_for(dana).get(MEMBERS).status_code == 404
    assert client_for(dana).post(MEMBERS, {"username": "dana", "role": "admin"}).status_code == 404
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    page = client_for(root).get(MEMBERS)
    assert page.status_code == 200 and "<td>ada</td>" in page.content.decode()
    assert role_of(dana, alpha) is None and role_of(root, alpha) is None


def test_a_member_of_another_project_cannot_be_changed_or_removed_from_this_ones_page(alpha, beta, ada, dana):
    roles.grant_role(ada, roles.ADMIN, beta)  # an admin of both: still only alpha's members on alpha's page
    roles.grant_role(dana, roles.ANNOTATOR, beta)
    admin = client_for(ada)
    assert admin.post(f"{MEMBERS}{dana.pk}/role", {"role": "admin"}).status_code == 404
    assert admin.post(f"{MEMBERS}{dana.pk}/remove").status_code == 404
    assert (role_of(dana, alpha), role_of(dana, beta)) == (None, "annotator")
    assert "<td>dana</td>" not in admin.get(MEMBERS).content.decode()
    assert recorded(alpha) == recorded(beta) == []


def test_the_last_project_admin_cannot_remove_or_demote_themselves(alpha, ada):
    admin = client_for(ada)
    removed = admin.post(f"{MEMBERS}{ada.pk}/remove")
    assert removed.status_code == 400
    assert "ada cannot be removed: they are the last project admin of Alpha" in removed.content.decode()
    demoted = admin.post(f"{MEMBERS}{ada.pk}/role", {"role": "reviewer"})
    assert demoted.status_code == 400 and "the last project admin" in demoted.content.decode()
    re_added = admin.post(MEMBERS, {"username": "ada", "role": "annotator"})
    assert re_added.status_code == 400 and "Role: ada cannot stop being a project admin" in re_added.content.decode()
    assert role_of(ada, alpha) == "admin" and recorded(alpha) == []


def test_with_another_project_admin_an_admin_may_step_down(alpha, ada, dana):
    roles.grant_role(dana, roles.ADMIN, alpha)
    stepped_down = client_for(ada).post(f"{MEMBERS}{ada.pk}/role", {"role": "annotator"})
    assert stepped_down.status_code == 302 and stepped_down["Location"] == "/p/alpha/"  # no longer their page
    assert role_of(ada, alpha) == "annotator"
    # Now dana is the last one.
    assert client_for(dana).post(f"{MEMBERS}{dana.pk}/remove").status_code == 400


def test_a_site_admin_may_remove_the_last_project_admin(alpha, ada):
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    assert client_for(root).post(f"{MEMBERS}{ada.pk}/remove").status_code == 302
    assert role_of(ada, alpha) is None
    assert recorded(alpha) == [("root", "member", "ada as project admin", "")]


def test_the_forms_need_the_csrf_token(alpha, ada, dana):
    roles.grant_role(dana, roles.ANNOTATOR, alpha)
    admin = client_for(ada, enforce_csrf_checks=True)
    assert admin.post(MEMBERS, {"username": "dana", "role": "admin"}).status_code == 403
    assert admin.post(f"{MEMBERS}{dana.pk}/remove").status_code == 403
    assert role_of(dana, alpha) == "annotator"


def test_add_user_grants_the_role_as_the_page_does_and_the_change_is_recorded(alpha, dana):
    call_command("add_user", "dana", role="reviewer", project="alpha", stdout=io.StringIO())
    assert role_of(dana, alpha) == "reviewer"
    assert recorded(alpha) == [("", "member", "", "dana as reviewer")]
