"""Django admin: every model of the labeling side is there, with search and filters that work."""
import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import reverse

from annotate.models import Annotation, ImportJob, Solution
from annotate.pool import importing
from tests.annotate.pool.test_prm800k import PHASE1, PHASE2, write_lines

pytestmark = pytest.mark.django_db


def test_every_annotate_model_is_registered():
    models = set(apps.get_app_config("annotate").get_models())
    assert models and models <= set(admin.site._registry)


@pytest.fixture
def pool(tmp_path):
    importing.import_pool(path=write_lines(tmp_path, [PHASE1, PHASE2]), format="prm800k")
    ImportJob.objects.create(path=str(tmp_path / "x.jsonl"), original_name="x.jsonl")


def test_every_changelist_renders_with_search_and_filters(client, admin_user, pool):
    client.force_login(admin_user)
    for model in apps.get_app_config("annotate").get_models():
        url = reverse(f"admin:annotate_{model._meta.model_name}_changelist")
        assert client.get(url).status_code == 200, url
        model_admin = admin.site._registry[model]
        if model_admin.search_fields:
            assert client.get(url, {"q": "5"}).status_code == 200, url


def test_solution_page_shows_steps_with_calculator_annotations_hidden(client, admin_user, tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text('{"question": "2 times 3?", "answer": "It is 2*3 = <<2*3=6>>6.\\n#### 6"}\n')
    importing.import_pool(path=path)
    client.force_login(admin_user)
    solution = Solution.objects.get()
    page = client.get(reverse("admin:annotate_solution_change", args=[solution.pk])).content.decode()
    assert "<li>It is 2*3 = 6.</li>" in page


def test_annotation_page_shows_step_labels_inline(client, admin_user, pool):
    client.force_login(admin_user)
    annotation = Annotation.objects.get(labeler=PHASE2["labeler"])
    page = client.get(reverse("admin:annotate_annotation_change", args=[annotation.pk]))
    assert page.status_code == 200
    assert "ratings of completions" in page.content.decode().lower()
    filtered = client.get(reverse("admin:annotate_annotation_changelist"), {"finish_reason": "found_error"})
    assert list(filtered.context["cl"].result_list) == [annotation]


def test_annotators_cannot_open_the_admin(client, annotator):
    client.force_login(annotator)
    response = client.get(reverse("admin:annotate_solution_changelist"))
    assert response.status_code == 302 and "login" in response.url
