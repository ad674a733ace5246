"""The REST API: who reaches what (anonymous / no role / annotator / reviewer / admin), tokens,
object-level rules, filters, export jobs and the streamed export."""
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from annotate.models import ExportJob
from annotate.pool import exporting
from jobs.states import JobState
from tests.annotations import annotate
from tests.factories import SolutionFactory, UserFactory

READS = [
    "/api/problems", "/api/solutions", "/api/annotations", "/api/queue/stats", "/api/imports", "/api/exports",
    "/api/exports/prm800k.jsonl", "/api/model-versions", "/api/training-runs", "/api/solution-scores",
    "/api/step-scores",
]
ADMIN_ONLY = {"/api/imports", "/api/exports", "/api/exports/prm800k.jsonl"}


def expected_read(role: str, url: str) -> int:
    if role == "anonymous":
        return 401
    if role == "admin" or (role == "reviewer" and url not in ADMIN_ONLY):
        return 200
    if role == "annotator" and url == "/api/annotations":
        return 200
    return 404 if role == "norole" else 403  # not a member: the project is not theirs to know of


@pytest.fixture
def users(annotator, reviewer, admin_user):
    return {"anonymous": None, "norole": UserFactory(username="nobody"), "annotator": annotator,
            "reviewer": reviewer, "admin": admin_user}


def client_for(user) -> APIClient:
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["anonymous", "norole", "annotator", "reviewer", "admin"])
def test_permission_matrix_for_reads(users, role):
    client = client_for(users[role])
    got = {url: client.get(url).status_code for url in READS}
    assert got == {url: expected_read(role, url) for url in READS}


@pytest.mark.django_db
@pytest.mark.parametrize("role, export_status, import_status, score_status", [
    ("anonymous", 401, 401, 401), ("norole", 404, 404, 404), ("annotator", 403, 403, 403),
    ("reviewer", 403, 403, 400), ("admin", 201, 400, 400),
])
def test_permission_matrix_for_writes(users, role, export_status, import_status, score_status):
    client = client_for(users[role])
    assert client.post("/api/exports", {"format": "trl"}, format="json").status_code == export_status
    # Admins get a 400 for an upload without a file; nobody else gets that far.
    assert client.post("/api/imports", {}, format="multipart").status_code == import_status
    # An empty body is a 400 for those allowed to score: the permission check comes first.
    assert client.post("/api/score", {}, format="json").status_code == score_status
    assert client.delete("/api/problems/1").status_code in {401, 403, 404, 405}


@pytest.mark.django_db
def test_annotators_see_only_their_own_annotations_and_cannot_reach_others_by_id(annotator, reviewer):
    other = UserFactory(username="other")
    mine = annotate(SolutionFactory(), [1, 1, 1], annotator=annotator, labeler="ann")
    theirs = annotate(SolutionFactory(), [1, -1], annotator=other, labeler="other")
    client = client_for(annotator)
    listed = client.get("/api/annotations").json()
    assert [a["id"] for a in listed["results"]] == [mine.pk]
    assert client.get(f"/api/annotations/{mine.pk}").json()["step_labels"][0]["completions"][0]["rating"] == 1
    assert client.get(f"/api/annotations/{theirs.pk}").status_code == 404
    assert client.get("/api/annotations?labeler=other").json()["count"] == 0
    assert client_for(reviewer).get(f"/api/annotations/{theirs.pk}").status_code == 200


@pytest.mark.django_db
def test_session_login_works_and_a_bad_token_is_refused(reviewer):
    client = APIClient()
    client.force_login(reviewer)
    assert client.get("/api/problems").status_code == 200
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert bad.get("/api/problems").status_code == 401


@pytest.mark.django_db
def test_create_api_token_prints_a_working_token_and_can_rotate_it(reviewer, capsys):
    call_command("create_api_token", "rev")
    first = capsys.readouterr().out.strip()
    call_command("create_api_token", "rev")
    assert capsys.readouterr().out.strip() == first
    call_command("create_api_token", "rev", "--rotate")
    second = capsys.readouterr().out.strip()
    assert second != first
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {second}")
    assert client.get("/api/solutions").status_code == 200
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no user named 'ghost'"):
        call_command("create_api_token", "ghost")


@pytest.mark.django_db
def test_lists_are_paginated_and_filter_only_on_allowlisted_fields(reviewer):
    right = SolutionFactory(is_correct=True, generator="g1")
    wrong = SolutionFactory(is_correct=False, generator="g2")
    client = client_for(reviewer)
    page = client.get("/api/solutions").json()
    assert set(page) == {"count", "next", "previous", "results"} and page["count"] == 2
    assert [s["id"] for s in client.get("/api/solutions?is_correct=false").json()["results"]] == [wrong.pk]
    assert [s["steps"][0]["text"] for s in client.get("/api/solutions?generator=g1").json()["results"]] == [
        "First step."
    ]
    assert right.pk
    # A field outside the allowlist does not filter at all.
    assert client.get("/api/solutions?content_hash=nothing").json()["count"] == 2
    assert client.get("/api/solutions?problem=abc").status_code == 400


@pytest.mark.django_db
def test_queue_stats_count_items_by_generation_and_status(reviewer):
    from annotate.models import QueueItem

    solution = SolutionFactory()
    QueueItem.objects.create(solution=solution, generation=1, slot=0)
    QueueItem.objects.create(solution=solution, generation=1, slot=1, status=QueueItem.Status.DONE)
    QueueItem.objects.create(solution=solution, generation=2, slot=0)
    stats = client_for(reviewer).get("/api/queue/stats").json()
    assert stats["generations"] == [
        {"generation": 1, "available": 1, "leased": 0, "done": 1, "retired": 0},
        {"generation": 2, "available": 1, "leased": 0, "done": 0, "retired": 0},
    ]


@pytest.mark.django_db
def test_streamed_export_is_the_same_as_the_file_export_and_honours_filters(admin_user):
    annotate(SolutionFactory(), [1, 1, 1], generation=1)
    annotate(SolutionFactory(), [1, 0, -1], generation=2)
    client = client_for(admin_user)
    response = client.get("/api/exports/prm800k.jsonl?generation=2")
    assert response.status_code == 200 and response.streaming
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    expected = list(exporting.iter_rows(format="prm800k", options=exporting.ExportOptions(generations=(2,))))
    assert lines == expected and len(lines) == 1 and lines[0]["generation"] == 2
    trl = client.get("/api/exports/trl.jsonl?neutral_is_good=false")
    labels = [json.loads(line)["labels"] for line in b"".join(trl.streaming_content).decode().splitlines()]
    assert labels == [[True, True, True], [True, False, False], [True, False]]
    assert client.get("/api/exports/prm800k.jsonl?generation=two").status_code == 400
    assert client.get("/api/exports/prm800k.jsonl?finish_reason=bored").status_code == 400
    assert client.get("/api/exports/csv.jsonl").status_code == 404


@pytest.mark.django_db
def test_export_job_via_the_api_offers_its_file_only_once_succeeded(admin_user):
    annotate(SolutionFactory(), [1, -1])
    annotate(SolutionFactory(), [1], finish_reason="give_up")
    client = client_for(admin_user)
    created = client.post("/api/exports", {"format": "processbench", "generations": [1]}, format="json").json()
    assert created["state"] == "pending" and created["download_url"] is None
    assert client.get(f"/api/exports/{created['id']}/download").status_code == 404
    exporting.run_export_job(job_id=created["id"])
    job = client.get(f"/api/exports/{created['id']}").json()
    assert job["state"] == JobState.SUCCEEDED and job["lines"] == 1 and job["percent"] == 100
    assert job["skipped"] == {"give_up": 1}  # what the export left out, by reason
    download = client.get(job["download_url"])
    assert download.status_code == 200
    row = json.loads(b"".join(download.streaming_content))
    assert row["label"] == 1
    assert ExportJob.objects.get().created_by == admin_user
    bad = client.post("/api/exports", {"format": "csv", "since": "soon"}, format="json")
    assert bad.status_code == 400 and set(bad.json()) == {"format", "since"}


@pytest.mark.django_db
def test_an_uploaded_prm800k_file_is_imported_by_its_job_and_its_labels_are_readable(admin_user):
    from annotate.pool import importing
    from tests.annotate.pool.test_exporting import PHASE2_LINE

    client = client_for(admin_user)
    upload = SimpleUploadedFile("phase2_train.jsonl", (json.dumps(PHASE2_LINE) + "\n").encode())
    created = client.post("/api/imports", {"file": upload, "format": "prm800k"}, format="multipart")
    assert created.status_code == 201 and created.json()["state"] == "pending"
    importing.run_import_job(job_id=created.json()["id"])
    job = client.get(f"/api/imports/{created.json()['id']}").json()
    assert (job["state"], job["created"], job["errors"]) == ("succeeded", 1, 0)
    (annotation,) = client.get("/api/annotations?generation=9").json()["results"]
    assert annotation["labeler"] == PHASE2_LINE["labeler"] and annotation["finish_reason"] == "found_error"
    assert [s["completions"][0]["rating"] for s in annotation["step_labels"]] == [1, 0, -1]
    bad = client.post("/api/imports", {"file": upload, "format": "csv"}, format="multipart")
    assert bad.status_code == 400 and "format" in bad.json()
