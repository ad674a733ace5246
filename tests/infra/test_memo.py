"""Kept by one process (infra/memo.py): memos true at every request, chores paced by a clock."""
import datetime as dt
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from annotate.models import LabelingConfig, Project
from infra import memo
from infra.memo import Pacer, ProcessMemo, forget_all
from tests.conftest import REPO_ROOT, worker_environment
from tests.factories import user_with_role

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def test_a_memo_loads_once_until_something_changes():
    loads = []
    kept = ProcessMemo(seconds=60)
    assert kept.get("key", lambda: loads.append(1) or ("value",)) == ("value",)
    assert kept.get("key", lambda: loads.append(1) or ("other",)) == ("value",)
    assert len(loads) == 1
    kept.forget("key")
    assert kept.get("key", lambda: ("loaded again",)) == ("loaded again",)


def test_a_change_in_another_process_reaches_every_memo_of_this_one():
    kept = ProcessMemo(seconds=60)
    kept.get("key", lambda: "before")
    other = ProcessMemo(seconds=60)
    other.forget()  # any memo's change renews the stamp in the shared cache, as another process's would
    assert kept.get("key", lambda: "after") == "after"


def test_a_memo_keeps_only_what_no_caller_can_change(db):
    with pytest.raises(TypeError, match="immutable"):
        ProcessMemo(seconds=60).get("key", lambda: ["a", "list"])
    kept = ProcessMemo(seconds=60)
    first = kept.get("config", lambda: LabelingConfig.objects.get_or_create(project=Project.objects.sole())[0])
    first.qc_rate = 0.99  # the caller's own copy
    first.__dict__["extra"] = {"mutable": True}
    second = kept.get("config", lambda: pytest.fail("loaded again"))
    assert second is not first and second.qc_rate != 0.99 and "extra" not in second.__dict__


def test_a_request_reads_the_shared_stamp_once(annotator, monkeypatch):
    client = Client()
    client.force_login(annotator)
    client.get(reverse("annotate:label-start"))
    reads = []
    current = memo._SharedStamp.current
    monkeypatch.setattr(memo._SharedStamp, "current", lambda self: reads.append(1) or current(self))
    real_get = memo.caches["memo"].get
    cache_reads = []
    monkeypatch.setattr(memo.caches["memo"], "get", lambda *a, **k: cache_reads.append(1) or real_get(*a, **k))
    assert client.get(reverse("annotate:label-start")).status_code == 200
    assert len(reads) >= 2 and len(cache_reads) == 1  # the user and their roles: one stamp read


def test_a_paced_chore_is_due_once_per_period_of_the_callers_clock():
    pacer = Pacer()
    assert pacer.due(T0, 5)
    assert not pacer.due(T0 + dt.timedelta(seconds=4.9), 5)
    assert pacer.due(T0 + dt.timedelta(seconds=5), 5)
    assert not pacer.due(T0 + dt.timedelta(seconds=6), 5)


def test_a_clock_that_went_back_or_a_forget_makes_it_due():
    pacer = Pacer()
    assert pacer.due(T0, 5)
    assert pacer.due(T0 - dt.timedelta(hours=1), 5)  # a test's clock, or a caller passing an earlier time
    assert not pacer.due(T0 - dt.timedelta(hours=1), 5)
    forget_all()
    assert pacer.due(T0 - dt.timedelta(hours=1), 5)


def in_another_process(code: str) -> None:
    """Run Django code in a process of its own (a second web process's change), on this test's database."""
    setup = "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings'); django.setup(); "
    subprocess.run([sys.executable, "-c", setup + code], cwd=REPO_ROOT, env=worker_environment(), check=True,
                   timeout=60)


def remembered(username: str):
    """An annotator, and their client after one page: their user and roles memoized here."""
    user = user_with_role(username, "annotator")
    client = Client()
    client.force_login(user)
    assert client.get(reverse("annotate:label-start")).status_code == 200
    return user, client


@pytest.mark.django_db(transaction=True)
def test_a_user_deactivated_in_another_process_is_refused_at_the_next_request():
    user, client = remembered("leaving")
    in_another_process(f"from django.contrib.auth import get_user_model; "
                       f"u = get_user_model().objects.get(pk={user.pk}); u.is_active = False; u.save()")
    response = client.get(reverse("annotate:label-start"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


@pytest.mark.django_db(transaction=True)
def test_a_role_revoked_in_another_process_is_refused_at_the_next_request():
    user, client = remembered("demoted")
    in_another_process(f"from annotate.models import Membership; "
                       f"Membership.objects.get(user_id={user.pk}).delete()")
    # No longer a member: the project answers as one they do not know of.
    assert client.get(reverse("annotate:label-start")).status_code == 404
    assert get_user_model().objects.get(pk=user.pk).is_active  # refused for the role, still a user
