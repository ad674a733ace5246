"""The pages: who may see what, htmx answers, 409 after submit, escaping and CSRF."""
import datetime as dt
import re

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from annotate.labeling import actions, queueing, tasks
from annotate.labeling.timing import ActiveTime
from annotate.models import (
    Annotation,
    LabelingConfig,
    Membership,
    Project,
    QueueItem,
    RatingOverride,
    ScreeningResult,
    Solution,
)
from tests.factories import ProblemFactory, SolutionFactory, user_with_role

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]
HTMX = {"HTTP_HX_REQUEST": "true"}


def client_for(user, **kwargs):
    client = Client(**kwargs)
    client.force_login(user)
    return client


@pytest.fixture
def pool():
    solutions = [SolutionFactory(steps=["Let $x = 2$.", "So 2x = 4.", "# Answer\n\n4"]) for _ in range(3)]
    queueing.ensure_default_queue()
    return solutions


@pytest.fixture
def task(annotator, pool):
    return queueing.claim_next(annotator=annotator)


ANNOTATOR_PAGES = ["annotate:home", "annotate:label-start"]
REVIEWER_PAGES = ["annotate:review-list", "annotate:quality"]


@pytest.mark.parametrize("name", ANNOTATOR_PAGES + REVIEWER_PAGES)
def test_every_page_needs_a_login(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


@pytest.mark.parametrize("name,role,status", [
    ("annotate:label-start", "annotator", 200), ("annotate:review-list", "annotator", 403),
    ("annotate:quality", "annotator", 403),
    ("annotate:label-start", "reviewer", 200), ("annotate:review-list", "reviewer", 200),
    ("annotate:quality", "reviewer", 200),
    ("annotate:label-start", "admin", 200), ("annotate:review-list", "admin", 200), ("annotate:quality", "admin", 200),
])
def test_permission_matrix_of_the_pages(name, role, status):
    user = user_with_role(f"{role}-user", role)
    assert client_for(user).get(reverse(name)).status_code == status


def test_a_user_without_a_role_cannot_label(django_user_model, pool):
    nobody = django_user_model.objects.create_user("nobody", password="x")
    client = client_for(nobody)
    assert "not a member of any project" in client.get(reverse("annotate:home")).content.decode()
    assert client.post(reverse("annotate:label-next")).status_code == 404
    assert not Annotation.objects.exists()


def test_roles_are_read_once_and_a_revoked_role_ends_at_the_next_request(annotator):
    client = client_for(annotator)
    assert client.get(reverse("annotate:label-start")).status_code == 200
    with CaptureQueriesContext(connection) as queries:
        assert client.get(reverse("annotate:label-start")).status_code == 200
    assert not any("annotate_membership" in q["sql"] for q in queries.captured_queries)
    Membership.objects.filter(user=annotator).delete()
    assert client.get(reverse("annotate:label-start")).status_code == 404


def test_a_deactivated_user_is_logged_out_at_the_next_request(annotator):
    client = client_for(annotator)
    assert client.get(reverse("annotate:label-start")).status_code == 200
    annotator.is_active = False
    annotator.save()
    response = client.get(reverse("annotate:label-start"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_there_is_no_sign_up_page(client):
    assert client.get("/accounts/signup/").status_code == 404
    assert client.get("/signup/").status_code == 404


def test_start_labeling_leases_an_item_and_shows_the_steps_blind(annotator, pool):
    client = client_for(annotator)
    response = client.post(reverse("annotate:label-next"))
    task = Annotation.objects.get(annotator=annotator)
    # The claim answers with the task page itself (no redirect and second request); the page
    # names its own URL, which label.js puts in the address bar.
    assert response.status_code == 200
    page = response.content.decode()
    assert f'data-url="{reverse("annotate:label-task", args=[task.pk])}"' in page
    assert 'Let <span class="math" data-display="false">x = 2</span>.' in page and 'id="step-2"' in page
    # No scores or selection reasons; no CDN. Read without the page's random tokens, which may spell anything.
    words = re.sub(r'(name="csrfmiddlewaretoken" value=|"X-CSRFToken": |nonce=)"[^"]*"', "", page)
    assert "PRM" not in words and "default order" not in words
    assert "katex.min.js" in words and "cdn" not in words.lower()


def test_coming_back_resumes_the_same_task(annotator, task):
    client = client_for(annotator)
    assert f'data-annotation="{task.pk}"' in client.post(reverse("annotate:label-next")).content.decode()
    assert client.get(reverse("annotate:label-start"))["Location"] == reverse("annotate:label-task", args=[task.pk])


def test_a_rating_answers_with_only_the_steps_it_changed_and_saves_the_label(annotator, task):
    client = client_for(annotator)
    whole = client.get(reverse("annotate:label-task", args=[task.pk]), **HTMX).content.decode()
    data = {"index": 0, "rating": 1, "total_ms": 900, "step_ms": "0:800"}
    response = client.post(reverse("annotate:label-rate", args=[task.pk]), data, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and response["HX-Reswap"] == "none"
    # Step 1 is rated and step 2 opens; step 3 is as it was, so it is not sent again.
    assert 'id="step-0" hx-swap-oob="true"' in body and 'id="step-1" hx-swap-oob="true"' in body
    assert 'id="step-2"' not in body and '<section id="task"' not in body and "<html" not in body
    assert 'id="task-head" class="task-head" hx-swap-oob="true"' in body and 'data-next="1"' in body
    assert 'id="submit-form" hx-swap-oob="true"' in body and "giveup" not in body
    assert len(body) < len(whole) * 0.6
    assert tasks.task_view(task).steps[0].rating == 1
    task.refresh_from_db()
    assert task.total_time_ms == 900


def test_a_first_error_redraws_the_steps_it_closes(annotator, task):
    client = client_for(annotator)
    client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 0, "rating": 1}, **HTMX)
    body = client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 1, "rating": -1}, **HTMX)
    body = body.content.decode()
    assert 'id="step-0"' not in body  # Unchanged.
    assert 'id="step-1" hx-swap-oob="true" class="step rated rated-wrong"' in body
    assert 'id="step-2" hx-swap-oob="true" class="step after_error"' in body
    assert 'data-finish="found_error"' in body


def test_a_rating_save_costs_a_bounded_number_of_sql_statements(annotator, task):
    """A spec of the hot path's cost. On PostgreSQL two statements and no transaction: one read
    (the annotation with its owner checked, its version, its lease and its steps) and one write
    of the rating with the annotation's updated_at, made only if the annotation is as read.
    Elsewhere one transaction holding the read, under the lock, and one write per row. The user,
    their roles and the labeling settings come from the process's memos, the session from Redis
    when there is one; a lease with more than half its time left is not rewritten."""
    client = client_for(annotator)
    client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 0, "rating": 1}, **HTMX)
    with CaptureQueriesContext(connection) as queries:
        response = client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 1, "rating": 1}, **HTMX)
    assert response.status_code == 200
    session_reads = 0 if "sessions" in settings.CACHES else 1  # cached in Redis, or read from the database
    # Elsewhere, inside a test's transaction, the action's BEGIN/COMMIT are a SAVEPOINT and its RELEASE.
    expected = 2 if connection.vendor == "postgresql" else 1 + 2 + 2  # the read, two writes, the savepoint's two
    assert len(queries) == expected + session_reads, "\n".join(q["sql"][:120] for q in queries.captured_queries)


def test_a_rating_renews_a_lease_that_is_running_out(annotator, task):
    client = client_for(annotator)
    item = QueueItem.objects.get(pk=task.queue_item_id)
    soon = timezone.now() + dt.timedelta(seconds=60)  # Less than half of the 600 s lease left.
    QueueItem.objects.filter(pk=item.pk).update(lease_expires_at=soon)
    client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 0, "rating": 1}, **HTMX)
    renewed = QueueItem.objects.get(pk=item.pk).lease_expires_at
    assert renewed > soon + dt.timedelta(seconds=400)
    client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 1, "rating": 1}, **HTMX)
    assert QueueItem.objects.get(pk=item.pk).lease_expires_at == renewed  # Fresh: not rewritten.


def test_a_rating_on_a_lapsed_lease_taken_by_someone_else_is_refused(annotator, task):
    client = client_for(annotator)
    other = user_with_role("other", "annotator")
    QueueItem.objects.filter(pk=task.queue_item_id).update(
        leased_to=other, lease_expires_at=timezone.now() + dt.timedelta(seconds=600))
    response = client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 0, "rating": 1}, **HTMX)
    assert response.status_code == 409
    assert tasks.task_view(task).steps[0].rating is None


def test_plain_form_posts_work_without_javascript(annotator, task):
    client = client_for(annotator)
    response = client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 0, "rating": -1})
    assert response.status_code == 302 and response["Location"] == reverse("annotate:label-task", args=[task.pk])
    response = client.post(reverse("annotate:label-submit", args=[task.pk]))
    following = Annotation.objects.get(annotator=annotator, status="in_progress")
    assert response["Location"] == reverse("annotate:label-task", args=[following.pk])  # Straight on to the next.
    assert Annotation.objects.get(pk=task.pk).finish_reason == "found_error"


def banner(page: str) -> str:
    """The task's error banner as the page shows it."""
    return re.search(r'<p id="task-error" class="error-banner" role="alert"( hidden)?>([^<]*)</p>', page).group(0)


def test_a_refused_plain_post_answers_400_with_the_reason_on_the_task_page(annotator, task):
    client = client_for(annotator)
    response = client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 2, "rating": 1})
    page = response.content.decode()
    assert response.status_code == 400 and '<section id="task"' in page and "<html" in page
    assert banner(page) == ('<p id="task-error" class="error-banner" role="alert">'
                            "rate step 1 first: steps are rated in order</p>")
    assert tasks.task_view(task).steps[2].rating is None
    response = client.post(reverse("annotate:label-submit", args=[task.pk]), {"finish_reason": "give_up"})
    assert response.status_code == 400 and "give up needs a reason" in banner(response.content.decode())


def test_a_plain_post_to_a_submitted_task_answers_409_with_the_reason_on_its_page(annotator, task):
    client = client_for(annotator)
    client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 0, "rating": -1})
    client.post(reverse("annotate:label-submit", args=[task.pk]), {"then": "home"})
    response = client.post(reverse("annotate:label-flag", args=[task.pk]), {"index": 0, "flagged": "1"})
    page = response.content.decode()
    assert response.status_code == 409 and "was already submitted" in banner(page)
    assert "Submitted as <strong>found_error</strong>" in page


def test_a_page_without_a_refusal_keeps_its_banner_hidden(annotator, task):
    page = client_for(annotator).get(reverse("annotate:label-task", args=[task.pk])).content.decode()
    assert banner(page) == '<p id="task-error" class="error-banner" role="alert" hidden></p>'


def test_submit_with_htmx_answers_with_the_next_task_page(annotator, task):
    """One request from one task to the next: the answer is the next task's page, swapped in as
    the body under the new task's URL (static/js/label.js starts it)."""
    client = client_for(annotator)
    client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 0, "rating": -1}, **HTMX)
    response = client.post(reverse("annotate:label-submit", args=[task.pk]), **HTMX)
    following = Annotation.objects.get(annotator=annotator, status="in_progress")
    assert following.pk != task.pk
    assert response.status_code == 200 and "HX-Redirect" not in response
    assert response["HX-Push-Url"] == reverse("annotate:label-task", args=[following.pk])
    assert response["HX-Retarget"] == "body" and response["HX-Reswap"] == "innerHTML"
    body = response.content.decode()
    assert f'data-annotation="{following.pk}"' in body and "Submitted as found_error" in body


def test_the_next_task_page_built_from_the_claim_is_the_page_read_back(annotator, task):
    client = client_for(annotator)
    for index in range(3):
        client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": index, "rating": 1}, **HTMX)
    answered = client.post(reverse("annotate:label-submit", args=[task.pk]), **HTMX).content.decode()
    following = Annotation.objects.get(annotator=annotator, status="in_progress")
    read_back = client.get(reverse("annotate:label-task", args=[following.pk])).content.decode()
    assert _task_section(answered) == _task_section(read_back) and 'id="step-2"' in _task_section(read_back)


def _task_section(page):
    """The task's section of a page, its CSRF tokens (masked anew on each page) left out."""
    section = page[page.index('<section id="task"'):page.index("</section>", page.index('<section id="task"'))]
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", section)


@pytest.mark.parametrize("screening", [False, True], ids=["no screening", "screening passed"])
def test_a_submit_with_the_next_task_page_costs_a_bounded_number_of_sql_statements(annotator, task, screening):
    """A spec of the step between tasks: one transaction that submits (the task locked and read,
    its steps chosen, its times, status and item written in one statement) and claims (the
    annotator's claim lock, their open task, lapsed leases put back if due, the lease, the new
    task with its steps' labels and completions in one statement), then the problem for the page;
    the steps come from the claim. SQLite, which has no round trips, writes row by row and takes
    no lock. Screening adds one read, the annotator's recorded decision, however large the set.
    (Gold, off here, adds its own checks.)"""
    LabelingConfig.objects.update_or_create(
        project=Project.objects.sole(), defaults={"qc_rate": 0, "screening_required": screening})
    if screening:
        gold = SolutionFactory(is_gold=True, steps=["a"])
        gold.steps.update(gold_rating=1)
        queueing.add_to_screening(solution=gold)
        ScreeningResult.objects.create(annotator=annotator, passed=True, step_accuracy=1.0, items=1)
    client = client_for(annotator)
    for index in range(3):
        client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": index, "rating": 1}, **HTMX)
    with CaptureQueriesContext(connection) as queries:
        response = client.post(reverse("annotate:label-submit", args=[task.pk]), **HTMX)
    assert response.status_code == 200 and 'data-annotation="' in response.content.decode()
    session_reads = 0 if "sessions" in settings.CACHES else 1  # cached in Redis, or read from the database
    # Inside a test's transaction its BEGIN/COMMIT are a SAVEPOINT and its RELEASE.
    bound = (10 if connection.vendor == "postgresql" else 15) + session_reads + screening
    assert len(queries) <= bound, "\n".join(q["sql"][:120] for q in queries.captured_queries)


def test_submit_with_htmx_after_the_last_task_goes_to_the_page_between_tasks(annotator, task):
    Solution.objects.exclude(pk=task.solution_id).delete()
    client = client_for(annotator)
    client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 0, "rating": -1}, **HTMX)
    response = client.post(reverse("annotate:label-submit", args=[task.pk]), **HTMX)
    assert response["HX-Redirect"] == reverse("annotate:label-start")


def test_after_the_last_task_submit_lands_on_the_page_between_tasks(annotator):
    SolutionFactory(steps=["only"])
    queueing.ensure_default_queue()
    task = queueing.claim_next(annotator=annotator)
    client = client_for(annotator)
    client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 0, "rating": 1})
    response = client.post(reverse("annotate:label-submit", args=[task.pk]))
    assert response["Location"] == reverse("annotate:label-start")
    assert "0 solutions waiting" in client.get(response["Location"]).content.decode()


def test_a_repeated_post_changes_nothing_and_a_post_after_submit_gets_409(annotator, task):
    client = client_for(annotator)
    for _ in range(2):
        rated = client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 0, "rating": -1}, **HTMX)
        assert rated.status_code == 200
    assert [s.rating for s in tasks.task_view(task).steps] == [-1, None, None]
    assert client.post(reverse("annotate:label-submit", args=[task.pk]), **HTMX).status_code == 200
    actions = [
        ("annotate:label-rate", {"index": 0, "rating": 1}), ("annotate:label-submit", {}),
        ("annotate:label-flag", {"index": 0, "flagged": "1"}),
    ]
    for name, data in actions:
        assert client.post(reverse(name, args=[task.pk]), data, **HTMX).status_code == 409
        assert client.post(reverse(name, args=[task.pk]), data).status_code == 409
    assert [s.rating for s in tasks.task_view(task).steps] == [-1]


def test_bad_input_gets_400_naming_the_field(annotator, task):
    client = client_for(annotator)
    response = client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": "x", "rating": 1}, **HTMX)
    assert response.status_code == 400 and "index" in response.content.decode()
    response = client.post(reverse("annotate:label-submit", args=[task.pk]), {"finish_reason": "give_up"}, **HTMX)
    assert response.status_code == 400 and "note" in response.content.decode()


def test_give_up_needs_a_reason_and_then_submits(annotator, task):
    client = client_for(annotator)
    data = {"finish_reason": "give_up", "note": "too long", "then": "home"}
    client.post(reverse("annotate:label-submit", args=[task.pk]), data)
    task.refresh_from_db()
    assert (task.status, task.finish_reason, task.finish_note) == ("submitted", "give_up", "too long")


def test_heartbeat_keeps_the_lease_and_records_time(annotator, task):
    client = client_for(annotator)
    before = QueueItem.objects.get(pk=task.queue_item_id).lease_expires_at
    response = client.post(reverse("annotate:label-heartbeat", args=[task.pk]), {"total_ms": 5000, "step_ms": "0:5000"})
    assert response.status_code == 204
    assert QueueItem.objects.get(pk=task.queue_item_id).lease_expires_at >= before
    task.refresh_from_db()
    assert task.total_time_ms == 5000


def test_no_task_is_reachable_by_id_across_annotators(annotator, task):
    other = user_with_role("other", "annotator")
    client = client_for(other)
    assert client.get(reverse("annotate:label-task", args=[task.pk])).status_code == 404
    for name in ("annotate:label-rate", "annotate:label-flag", "annotate:label-undo", "annotate:label-submit",
                 "annotate:label-heartbeat", "annotate:label-complete"):
        assert client.post(reverse(name, args=[task.pk]), {"index": 0, "rating": 1}, **HTMX).status_code == 404
    assert tasks.task_view(task).steps[0].rating is None


def test_annotators_cannot_review_or_override(annotator, task):
    actions.rate(annotation=task, index=0, rating=-1)
    actions.submit(annotation=task)
    client = client_for(annotator)
    assert client.get(reverse("annotate:review-detail", args=[task.pk])).status_code == 403
    overridden = client.post(reverse("annotate:review-override", args=[task.pk]), {"index": 0, "rating": 1})
    assert overridden.status_code == 403
    assert client.post(reverse("annotate:review-make-gold", args=[task.pk])).status_code == 403
    assert not RatingOverride.objects.exists()


def test_htmx_posts_without_the_csrf_token_are_refused(annotator, task):
    client = client_for(annotator, enforce_csrf_checks=True)
    response = client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 0, "rating": 1}, **HTMX)
    assert response.status_code == 403
    assert tasks.task_view(task).steps[0].rating is None
    page = client.get(reverse("annotate:label-task", args=[task.pk]))
    token = page.cookies["csrftoken"].value
    data = {"index": 0, "rating": 1}
    response = client.post(reverse("annotate:label-rate", args=[task.pk]), data, HTTP_X_CSRFTOKEN=token, **HTMX)
    assert response.status_code == 200
    assert 'hx-headers=\'{"X-CSRFToken": "' in page.content.decode()
    # A rating's answer carries no token of its own (nor a new cookie): the page's goes on working.
    assert "csrfmiddlewaretoken" not in response.content.decode() and "csrftoken" not in response.cookies
    data = {"index": 1, "rating": 1}
    response = client.post(reverse("annotate:label-rate", args=[task.pk]), data, HTTP_X_CSRFTOKEN=token, **HTMX)
    assert response.status_code == 200 and tasks.task_view(task).steps[1].rating == 1


def test_a_task_page_carries_one_csrf_token_and_a_form_posting_it_is_accepted(annotator, task):
    client = client_for(annotator, enforce_csrf_checks=True)
    page = client.get(reverse("annotate:label-task", args=[task.pk])).content.decode()
    in_forms = re.findall(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    in_headers = re.findall(r'"X-CSRFToken": "([^"]+)"', page)
    assert len(in_forms) > 3 and len(set(in_forms + in_headers)) == 1
    posted = client.post(reverse("annotate:label-flag", args=[task.pk]),
                         {"index": 0, "flagged": "1", "csrfmiddlewaretoken": in_forms[0]})
    assert posted.status_code == 302 and tasks.task_view(task).steps[0].flagged


def test_imported_script_tags_are_escaped_everywhere(annotator, reviewer):
    problem = ProblemFactory(statement="<script>alert('p')</script> What is $1+1$?", ground_truth_answer="<b>2</b>")
    solution = SolutionFactory(problem=problem, steps=["<script>alert('s')</script>", "<img src=x onerror=alert(1)>"])
    queueing.ensure_default_queue()
    task = queueing.claim_next(annotator=annotator)
    assert task.solution == solution
    page = client_for(annotator).get(reverse("annotate:label-task", args=[task.pk])).content.decode()
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>2</b>" not in page
    assert "&lt;script&gt;alert(&#x27;s&#x27;)&lt;/script&gt;" in page
    actions.rate(annotation=task, index=0, rating=-1)
    actions.submit(annotation=task)
    for url in (reverse("annotate:review-list"), reverse("annotate:review-detail", args=[task.pk])):
        body = client_for(reviewer).get(url).content.decode()
        assert "<script>alert" not in body and "<img src=x" not in body


def test_calculator_annotations_are_hidden_on_the_page(annotator):
    SolutionFactory(steps=["She has 48/2 = <<48/2=24>>24 clips."])
    queueing.ensure_default_queue()
    task = queueing.claim_next(annotator=annotator)
    page = client_for(annotator).get(reverse("annotate:label-task", args=[task.pk])).content.decode()
    assert "48/2 = 24 clips." in page and "&lt;&lt;48/2=24&gt;&gt;" not in page


def test_reviewer_filters_overrides_with_history_and_sees_prm_scores(annotator, reviewer, pool):
    from scoring.models import ModelVersion, SolutionScore, StepScore
    from scoring.store import registry

    second = user_with_role("second", "annotator")
    QueueItem.objects.all().delete()
    from annotate.models import LabelingConfig
    LabelingConfig.objects.update_or_create(
        project=Project.objects.sole(), defaults={"overlap_k": 2})
    queueing.ensure_default_queue()
    mine, theirs = queueing.claim_next(annotator=annotator), queueing.claim_next(annotator=second)
    assert mine.solution_id == theirs.solution_id
    for task, ratings in ((mine, [1, 1, 1]), (theirs, [1, -1])):
        for index, rating in enumerate(ratings):
            actions.rate(annotation=task, index=index, rating=rating)
        actions.submit(annotation=task)
    version = ModelVersion.objects.create(name="prm-v1", path="x", weights_sha256="0" * 64)
    registry.set_current_model(version, project=Project.objects.sole())
    SolutionScore.objects.create(
        solution=mine.solution, model_version=version, product=0.2, min=0.1, last=0.3, mean=0.5
    )
    for step in mine.solution.steps.all():
        StepScore.objects.create(step=step, model_version=version, p=0.125 + step.index)
    client = client_for(reviewer)
    listed = client.get(
        reverse("annotate:review-list"), {"annotator": annotator.pk, "disagreement": "1"}
    ).content.decode()
    assert reverse("annotate:review-detail", args=[mine.pk]) in listed
    detail = client.get(reverse("annotate:review-detail", args=[mine.pk])).content.decode()
    scores_url = reverse("scoring:review-scores", args=[mine.solution_id])
    assert f'hx-get="{scores_url}"' in detail and 'hx-trigger="load"' in detail
    assert "prm-v1" not in detail  # The labeling page itself reads no scores.
    partial = client.get(scores_url, **HTMX).content.decode()
    assert "<html" not in partial and "prm-v1" in partial and "0.125" in partial and "1.125" in partial
    assert "0.100" in partial  # The solution's min score.
    assert "prm-v1" in client.get(scores_url).content.decode()  # Without htmx, a page of its own.
    assert client_for(annotator).get(scores_url).status_code == 403
    client.post(
        reverse("annotate:review-override", args=[mine.pk]), {"index": 1, "rating": -1, "note": "step 2 is wrong"}
    )
    override = RatingOverride.objects.get()
    assert (override.previous_rating, override.new_rating, override.reviewer) == (1, -1, reviewer)
    assert tasks.task_view(mine).steps[1].rating == -1
    assert "step 2 is wrong" in client.get(reverse("annotate:review-detail", args=[mine.pk])).content.decode()
    # Now both agree, so the disagreement filter drops it.
    listed = client.get(reverse("annotate:review-list"), {"disagreement": "1"}).content.decode()
    assert reverse("annotate:review-detail", args=[mine.pk]) not in listed


def test_the_review_scores_partial_says_when_the_current_model_has_not_scored_the_solution(reviewer, pool):
    from scoring.models import ModelVersion
    from scoring.store import registry

    client = client_for(reviewer)
    url = reverse("scoring:review-scores", args=[pool[0].pk])
    assert "there is no current model" in client.get(url, **HTMX).content.decode()
    registry.set_current_model(ModelVersion.objects.create(name="prm-v2", path="x", weights_sha256="0" * 64),
                               project=Project.objects.sole())
    assert "prm-v2) has not scored this solution" in client.get(url, **HTMX).content.decode()


def test_annotate_reads_no_scoring_model():
    # The one-way rule covers tables too: annotate neither imports scoring nor looks its models up.
    from pathlib import Path

    import annotate

    for path in Path(annotate.__file__).parent.rglob("*.py"):
        text = path.read_text()
        assert "get_model(\"scoring\"" not in text and "from scoring" not in text and "import scoring" not in text, path


def test_a_refused_override_answers_400_with_the_reason_on_the_review_page(annotator, reviewer, task):
    actions.rate(annotation=task, index=0, rating=-1)
    actions.submit(annotation=task)
    response = client_for(reviewer).post(reverse("annotate:review-override", args=[task.pk]),
                                         {"index": 0, "rating": 5})
    page = response.content.decode()
    assert response.status_code == 400 and "rating must be one of -1, 0, 1" in page
    assert '<li class="error">' in page and "<html" in page  # the annotation's page, the reason among its messages
    assert not RatingOverride.objects.exists()


def test_adding_a_solution_that_is_not_gold_to_screening_answers_400_with_the_reason(admin_user, annotator, task):
    actions.rate(annotation=task, index=0, rating=-1)
    actions.submit(annotation=task)
    response = client_for(admin_user).post(reverse("annotate:review-add-to-screening", args=[task.pk]))
    assert response.status_code == 400 and "Make the solution gold first" in response.content.decode()


def test_a_claim_refused_for_a_failed_screening_answers_403_with_the_reason(annotator, pool):
    ScreeningResult.objects.create(annotator=annotator, passed=False, step_accuracy=0.0, items=1)
    gold = SolutionFactory(is_gold=True, steps=["a"])
    queueing.add_to_screening(solution=gold)
    response = client_for(annotator).post(reverse("annotate:label-next"))
    page = response.content.decode()
    assert response.status_code == 403 and "the screening set was not passed" in page and "next-form" not in page
    assert not Annotation.objects.filter(annotator=annotator).exists()


def test_admin_makes_a_solution_gold_from_a_label(admin_user, annotator, task):
    actions.rate(annotation=task, index=0, rating=-1)
    actions.submit(annotation=task)
    client_for(admin_user).post(reverse("annotate:review-make-gold", args=[task.pk]))
    solution = Solution.objects.get(pk=task.solution_id)
    assert solution.is_gold
    assert [s.gold_rating for s in solution.steps.order_by("index")] == [-1, None, None]


def test_home_shows_progress_and_median_time(annotator, task):
    actions.rate(annotation=task, index=0, rating=-1, times=ActiveTime(total_ms=42_000))
    actions.submit(annotation=task)
    page = client_for(annotator).get(reverse("annotate:home"), follow=True).content.decode()
    assert "42 s" in page and "Start labeling" in page


def test_admin_puts_a_gold_solution_in_the_screening_set(admin_user, annotator, task):
    actions.rate(annotation=task, index=0, rating=-1)
    actions.submit(annotation=task)
    client = client_for(admin_user)
    client.post(reverse("annotate:review-add-to-screening", args=[task.pk]))
    assert not QueueItem.objects.filter(generation=-1).exists()  # Not gold yet: refused.
    client.post(reverse("annotate:review-make-gold", args=[task.pk]))
    client.post(reverse("annotate:review-add-to-screening", args=[task.pk]))
    item = QueueItem.objects.get(generation=-1)
    assert item.is_initial_screening and item.solution_id == task.solution_id
    newcomer = user_with_role("newcomer", "annotator")
    assert queueing.claim_next(annotator=newcomer).is_initial_screening
    assert client_for(annotator).post(reverse("annotate:review-add-to-screening", args=[task.pk])).status_code == 403


def test_an_admin_lets_an_annotator_who_passed_screening_take_the_set_again(admin_user, annotator):
    gold = SolutionFactory(is_gold=True, steps=["a"])
    gold.steps.update(gold_rating=1)
    queueing.add_to_screening(solution=gold)
    ScreeningResult.objects.create(annotator=annotator, passed=True, step_accuracy=1.0, items=1)
    Annotation.objects.create(solution=gold, annotator=annotator, labeler="x", is_initial_screening=True,
                              status=Annotation.Status.SUBMITTED)
    page = client_for(admin_user).get(reverse("annotate:quality")).content.decode()
    assert reverse("annotate:quality-reset-screening", args=[annotator.pk]) in page
    client_for(admin_user).post(reverse("annotate:quality-reset-screening", args=[annotator.pk]))
    assert not ScreeningResult.objects.filter(annotator=annotator).exists()
    assert queueing.claim_next(annotator=annotator).solution_id == gold.pk
