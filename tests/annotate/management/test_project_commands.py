"""The commands and projects: create_project, add_user's memberships, and `--project` on the
commands that read or write a project's data (the sole project when left out; with several, an
error naming them)."""
import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from annotate.models import Annotation, Assistance, LabelingConfig, Membership, Project, Solution
from tests.annotate.pool.test_import_prm_datasets import write
from tests.annotations import PHASE2_LINE, import_lines

pytestmark = pytest.mark.django_db


def run(*args, **options) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, **options)
    return out.getvalue()


def test_create_project_makes_the_project_and_its_settings_from_the_environments_defaults(settings):
    settings.STEPWISE_QUEUE_SIZE = 123
    out = run("create_project", "gsm8k-pilot", "--name", "GSM8K pilot", "--description", "Three experts")
    project = Project.objects.get(slug="gsm8k-pilot")
    assert (project.name, project.description, project.guideline_version) == ("GSM8K pilot", "Three experts", 1)
    assert LabelingConfig.objects.get(project=project).queue_size == 123
    assert "gsm8k-pilot" in out and "add_user" in out


@pytest.mark.parametrize(("slug", "message"), [("Not A Slug", "slug"), ("taken", "slug")])
def test_create_project_refuses_a_bad_or_taken_slug_and_makes_nothing(slug, message):
    Project.objects.create(slug="taken", name="Taken")
    with pytest.raises(CommandError, match=message):
        run("create_project", slug, "--name", "X")
    assert not Project.objects.filter(name="X").exists()


@pytest.fixture
def two_projects():
    Project.objects.filter(slug="default").delete()  # made by the migrations, empty: two projects, not three
    return Project.objects.create(slug="gsm8k", name="GSM8K"), Project.objects.create(slug="math", name="MATH")


def test_add_user_makes_a_member_and_adds_an_existing_user_to_another_project(two_projects, monkeypatch):
    gsm8k, math = two_projects
    monkeypatch.delenv("STEPWISE_NEW_PASSWORD", raising=False)
    first = run("add_user", "dana", "--role", "annotator", "--project", "gsm8k")
    assert "password: " in first
    second = run("add_user", "dana", "--role", "reviewer", "--project", "math")
    assert "password" not in second  # an existing account keeps its password
    user = get_user_model().objects.get(username="dana")
    assert dict(Membership.objects.filter(user=user).values_list("project__slug", "role")) == {
        "gsm8k": "annotator", "math": "reviewer"}
    assert not (user.is_staff or user.is_superuser)
    # Named again with another role: the role changes, still one membership.
    assert "was annotator of gsm8k" in run("add_user", "dana", "--role", "admin", "--project", "gsm8k")
    assert Membership.objects.get(user=user, project=gsm8k).role == "admin"
    assert not get_user_model().objects.get(username="dana").is_superuser  # a project admin, not a site admin


def test_add_user_admin_without_a_project_is_a_site_admin_as_before(two_projects):
    run("add_user", "ada", "--role", "admin")
    ada = get_user_model().objects.get(username="ada")
    assert ada.is_superuser and ada.is_staff and not Membership.objects.filter(user=ada).exists()


def test_add_user_without_a_project_among_several_names_the_choices(two_projects):
    with pytest.raises(CommandError, match="gsm8k, math"):
        run("add_user", "sam", "--role", "annotator")
    with pytest.raises(CommandError, match="no project 'physics'; the projects are: gsm8k, math"):
        run("add_user", "sam", "--role", "annotator", "--project", "physics")
    assert not get_user_model().objects.filter(username="sam").exists()


def test_add_user_with_one_project_needs_no_project_option():
    run("add_user", "sole", "--role", "annotator")
    assert Membership.objects.get(user__username="sole").project == Project.objects.sole()


def test_import_and_export_commands_work_on_the_project_they_name(two_projects, tmp_path):
    gsm8k, math = two_projects
    path = write(tmp_path, [{"problem": "What is 2 + 3?", "ground_truth_answer": "5", "steps": ["2 + 3 = 5.",
                                                                                                "# Answer\n\n5"]}])
    assert "project math" in run("import_pool", str(path), "--project", "math")
    assert set(Solution.objects.values_list("project__slug", flat=True)) == {"math"}
    with pytest.raises(CommandError, match="several projects exist; name one of: gsm8k, math"):
        run("import_pool", str(path))

    import_lines(tmp_path, [PHASE2_LINE], project=gsm8k)
    out = tmp_path / "math.jsonl"
    assert "0 prm800k lines of project math" in run("export_prm800k", str(out), "--project", "math",
                                                      "--include-qc")
    assert out.read_text() == ""
    run("export_prm800k", str(out), "--project", "gsm8k", "--include-qc")
    assert [json.loads(line)["labeler"] for line in out.read_text().splitlines()] == [PHASE2_LINE["labeler"]]
    with pytest.raises(CommandError, match="gsm8k, math"):
        run("export_prm800k", str(out))
    assert Annotation.objects.get().project == gsm8k


def test_seed_demo_shows_a_gsm8k_and_a_math_project_with_different_rules():
    Project.objects.sole()  # the `default` project every install has after migrating
    out = run("seed_demo", problems=2)
    gsm8k, math = Project.objects.get(slug="gsm8k-demo"), Project.objects.get(slug="math-demo")
    # A new install's empty default project does not stand beside them.
    assert set(Project.objects.values_list("slug", flat=True)) == {"gsm8k-demo", "math-demo"}
    rules = [LabelingConfig.of(project) for project in (gsm8k, math)]
    assert [(r.overlap_k, r.stop_at_first_error, r.assistance) for r in rules] == [
        (1, True, Assistance.BLIND), (2, False, Assistance.SUGGEST)]
    for project in (gsm8k, math):
        pool = Solution.objects.filter(project=project)
        assert pool.count() == 4 and set(pool.values_list("source", flat=True)) == {"demo"}
        assert project.guideline
    assert "Demo project gsm8k-demo" in out and "Demo project math-demo" in out and "4 ready to label" in out
    annotator = get_user_model().objects.get(username="annotator")
    assert dict(Membership.objects.filter(user=annotator).values_list("project__slug", "role")) == {
        "gsm8k-demo": "annotator", "math-demo": "annotator"}
    assert get_user_model().objects.get(username="admin").is_superuser

    # Run again (the next `./stepwise run`): nothing new, and an admin's change of the rules stays.
    LabelingConfig.objects.filter(project=math).update(overlap_k=3)
    again = run("seed_demo", problems=2)
    assert "already imported (4 solutions)" in again
    assert Solution.objects.count() == 8 and LabelingConfig.objects.get(project=math).overlap_k == 3


def test_seed_demo_keeps_a_default_project_that_holds_something(tmp_path):
    import_lines(tmp_path, [PHASE2_LINE])
    run("seed_demo", problems=1)
    assert Project.objects.filter(slug="default").exists() and Project.objects.count() == 3
