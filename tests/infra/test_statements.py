"""Statements built once per connection (infra/statements.py) answer as their QuerySets do."""
import datetime as dt
from typing import NamedTuple

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from annotate.models import Annotation, Completion, QueueItem, StepLabel
from infra import statements
from tests.factories import SolutionFactory, user_with_role

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


@pytest.fixture
def labeled():
    """An annotation of a 3-step solution with a rating, a flag, a rewrite and a leased item."""
    user = user_with_role("statements-annotator", "annotator")
    solution = SolutionFactory(steps=["one", "two", "three"])
    item = QueueItem.objects.create(solution=solution, generation=0, status=QueueItem.Status.LEASED, leased_to=user,
                                    lease_expires_at=timezone.now() + dt.timedelta(minutes=5))
    annotation = Annotation.objects.create(solution=solution, annotator=user, labeler=user.username, queue_item=item)
    for index, text in enumerate(["one", "two", "three"]):
        label = StepLabel.objects.create(annotation=annotation, index=index,
                                         human_completion={"text": "fixed"} if index == 1 else None)
        Completion.objects.create(step_label=label, index=0, text=text, rating=1 - index if index < 2 else None,
                                  flagged=index == 0)
    return annotation


def steps_of(annotation_id):
    return (Completion.objects.filter(step_label__annotation_id=annotation_id, index=0)
            .order_by("step_label__index")
            .values_list("step_label__index", "text", "rating", "flagged", "step_label__human_completion"))


STEPS = statements.Compiled(steps_of)
LEASE = statements.Compiled(lambda pk: QueueItem.objects.filter(pk=pk).values_list("status", "lease_expires_at"))


def test_a_compiled_query_gives_the_querysets_rows_with_its_conversions(labeled):
    assert STEPS.rows(annotation_id=labeled.pk) == list(steps_of(labeled.pk))
    assert STEPS.rows(annotation_id=labeled.pk)[1] == (1, "two", 0, False, {"text": "fixed"})  # JSON, booleans
    (status, expires_at), = LEASE.rows(pk=labeled.queue_item_id)
    assert status == "leased" and expires_at == QueueItem.objects.get().lease_expires_at  # an aware datetime
    assert STEPS.rows(annotation_id=labeled.pk + 1000) == []


def test_each_call_runs_the_same_sql_text_with_its_own_arguments(labeled):
    other = SolutionFactory(steps=["x"])
    second = Annotation.objects.create(solution=other, annotator=labeled.annotator, labeler="second")
    Completion.objects.create(step_label=StepLabel.objects.create(annotation=second, index=0), index=0, text="x")
    with CaptureQueriesContext(connection) as queries:
        first_rows, second_rows = STEPS.rows(annotation_id=labeled.pk), STEPS.rows(annotation_id=second.pk)
    assert [row[1] for row in first_rows] == ["one", "two", "three"] and [row[1] for row in second_rows] == ["x"]
    first_sql, second_sql = (q["sql"] for q in queries.captured_queries)
    assert first_sql.replace(f"= {labeled.pk}", "= ?") == second_sql.replace(f"= {second.pk}", "= ?")


def test_the_orm_builds_a_statement_once_per_connection(labeled):
    built = []

    def build(pk):
        built.append(pk)
        return QueueItem.objects.filter(pk=pk).values_list("status")

    counted = statements.Compiled(build)
    for _ in range(3):
        assert counted.rows(pk=labeled.queue_item_id) == [("leased",)]
    assert len(built) == 1


def test_a_compiled_update_changes_its_rows_and_counts_them(labeled):
    expire = statements.Compiled(lambda now: statements.updating(
        QueueItem.objects.filter(status=QueueItem.Status.LEASED, lease_expires_at__lt=now),
        status=QueueItem.Status.AVAILABLE, leased_to=None, lease_expires_at=None,
    ), datetimes=("now",))
    assert expire.execute(now=timezone.now()) == 0  # the lease runs five more minutes
    assert expire.execute(now=timezone.now() + dt.timedelta(minutes=6)) == 1
    item = QueueItem.objects.get()
    assert (item.status, item.leased_to, item.lease_expires_at) == (QueueItem.Status.AVAILABLE, None, None)


def test_an_argument_the_orm_folds_out_of_the_sql_is_refused_when_built():
    # A positive integer column is never below a negative number: the ORM leaves no parameter.
    with pytest.raises(ValueError, match="not parameters of its SQL"):
        statements.Compiled(lambda below: StepLabel.objects.filter(index__lt=-below).values_list("pk")).rows(below=1)


def test_arguments_must_be_the_ones_the_statement_takes(labeled):
    with pytest.raises(TypeError, match="takes annotation_id"):
        STEPS.rows(pk=labeled.pk)


def test_a_row_is_updated_by_primary_key_with_values_prepared_by_their_fields(labeled):
    label = labeled.step_labels.get(index=2)
    when = timezone.now()
    with transaction.atomic(), statements.RowWrites() as writes:
        writes.update(StepLabel, label.pk, human_completion={"text": "écrit"}, time_ms=1234)
        writes.update(Annotation, labeled.pk, timestamp=when)
        writes.update(StepLabel, label.pk + 1000, time_ms=1)  # no such row: nothing changes
    label.refresh_from_db()
    labeled.refresh_from_db()
    assert (label.human_completion, label.time_ms, labeled.timestamp) == ({"text": "écrit"}, 1234, when)


def test_row_writes_keep_every_auto_now_field_true(labeled):
    long_ago = timezone.now() - dt.timedelta(days=3)
    Annotation.objects.filter(pk=labeled.pk).update(updated_at=long_ago)
    before = timezone.now()
    with statements.RowWrites() as writes:
        writes.update(Annotation, labeled.pk)  # no values: the row is marked changed
    assert Annotation.objects.get(pk=labeled.pk).updated_at >= before
    given = timezone.now() - dt.timedelta(hours=1)
    with statements.RowWrites() as writes:
        writes.update(Annotation, labeled.pk, total_time_ms=10, updated_at=given)  # a value given wins
    assert Annotation.objects.get(pk=labeled.pk).updated_at == given


def test_a_compiled_update_keeps_every_auto_now_field_true(labeled):
    long_ago = timezone.now() - dt.timedelta(days=3)
    Annotation.objects.filter(pk=labeled.pk).update(updated_at=long_ago)
    finish = statements.Compiled(lambda pk: statements.updating(Annotation.objects.filter(pk=pk), finish_note="x"))
    before = timezone.now()
    assert finish.execute(pk=labeled.pk) == 1
    first = Annotation.objects.get(pk=labeled.pk).updated_at
    assert first >= before
    assert finish.execute(pk=labeled.pk) == 1  # the same SQL text, the time of this run
    assert Annotation.objects.get(pk=labeled.pk).updated_at >= first


class StepRow(NamedTuple):
    index: int
    text: str
    rating: int | None
    flagged: bool | None
    human_completion: dict | None


def test_a_compiled_query_gives_named_rows_of_its_columns(labeled):
    named = statements.Compiled(steps_of, row=StepRow)
    rows = named.rows(annotation_id=labeled.pk)
    assert rows == STEPS.rows(annotation_id=labeled.pk)
    assert rows[1].text == "two" and rows[1].human_completion == {"text": "fixed"}
    too_few = statements.Compiled(lambda annotation_id: steps_of(annotation_id).values_list("text"), row=StepRow)
    with pytest.raises(ValueError, match="1 columns for StepRow"):
        too_few.rows(annotation_id=labeled.pk)


@pytest.mark.postgresql
def test_postgresql_prepares_a_statement_a_connection_runs_again_and_again(labeled):
    """The server parses and plans the labeling path's statements once per connection (settings:
    Django leaves psycopg's preparing off unless asked)."""
    for _ in range(6):
        STEPS.rows(annotation_id=labeled.pk)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any('"annotate_completion"."text"' in sql and "ORDER BY" in sql for sql in prepared), prepared


def test_insert_writes_new_objects_as_bulk_create_would_and_gives_them_their_keys(labeled, monkeypatch):
    solution = SolutionFactory(steps=["a", "b"])
    annotation = Annotation(solution=solution, annotator=labeled.annotator, labeler="inserted")
    statements.insert([annotation])
    stored = Annotation.objects.get(pk=annotation.pk)
    # Each field's default and pre_save, as the ORM's create() gives them.
    assert stored.labeler == "inserted" and stored.status == Annotation.Status.IN_PROGRESS
    assert stored.question_extra == {} and stored.created_at is not None and stored.is_quality_control is False
    assert not annotation._state.adding
    monkeypatch.setattr(statements, "_INSERT_BATCH", 2)  # more rows than one statement takes
    labels = [StepLabel(annotation=annotation, index=i) for i in range(5)]
    statements.insert(labels)
    assert [(label.pk, label.index) for label in labels] == list(
        StepLabel.objects.filter(annotation=annotation).order_by("pk").values_list("pk", "index"))
    completions = [Completion(step_label=label, index=0, text=f"step {label.index}") for label in labels]
    statements.insert(completions)
    assert {c.pk: c.text for c in completions} == dict(
        Completion.objects.filter(step_label__annotation=annotation).values_list("pk", "text"))
    assert Completion.objects.get(pk=completions[0].pk).extra == {}


def test_row_writes_change_rows_of_several_tables_together_merging_those_of_one_row(labeled):
    first, second = StepLabel.objects.filter(annotation=labeled).order_by("index")[:2]
    completion = Completion.objects.get(step_label=first)
    writes = statements.RowWrites()
    writes.update(Completion, completion.pk, rating=-1)
    writes.update(StepLabel, second.pk, human_completion=None)
    writes.update(StepLabel, second.pk, time_ms=1500)  # the same row: one UPDATE of both
    writes.update(Annotation, labeled.pk, total_time_ms=4000)
    with CaptureQueriesContext(connection) as queries:
        writes.write()
    assert len(queries) == (1 if connection.vendor == "postgresql" else 3)
    assert Completion.objects.get(pk=completion.pk).rating == -1
    assert StepLabel.objects.filter(pk=second.pk).values_list("human_completion", "time_ms").get() == (None, 1500)
    assert Annotation.objects.get(pk=labeled.pk).total_time_ms == 4000
    with CaptureQueriesContext(connection) as queries:
        writes.write()  # written once: nothing is left to write
    assert len(queries) == 0


RELEASE = statements.Compiled(lambda pk: statements.updating(
    QueueItem.objects.filter(pk=pk, status=QueueItem.Status.LEASED), status=QueueItem.Status.AVAILABLE, leased_to=None,
), returning=("id", "solution"))


def test_a_compiled_update_returning_fields_gives_the_rows_it_changed(labeled):
    item = labeled.queue_item
    assert RELEASE.rows(pk=item.pk) == [(item.pk, item.solution_id)]
    assert QueueItem.objects.get(pk=item.pk).status == QueueItem.Status.AVAILABLE
    assert RELEASE.rows(pk=item.pk) == []  # no longer leased: nothing changed, nothing returned


def test_row_writes_as_a_block_write_when_it_ends_and_not_after_an_error(labeled):
    completion = Completion.objects.get(step_label__annotation=labeled, step_label__index=2)
    with pytest.raises(ValueError), statements.RowWrites() as writes:
        writes.update(Completion, completion.pk, rating=1)
        raise ValueError("the action was refused")
    assert Completion.objects.get(pk=completion.pk).rating is None
    with statements.RowWrites() as writes:
        writes.update(Completion, completion.pk, rating=1)
    assert Completion.objects.get(pk=completion.pk).rating == 1


def xmin_of(annotation) -> str:
    with connection.cursor() as cursor:
        cursor.execute('SELECT xmin::text FROM "annotate_annotation" WHERE id = %s', [annotation.pk])
        return cursor.fetchone()[0]


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)  # so that each write has a transaction, and an xmin, of its own
def test_row_writes_if_a_version_write_all_rows_while_it_holds_and_none_after_a_change(labeled):
    completion = Completion.objects.get(step_label__annotation=labeled, step_label__index=2)
    version = xmin_of(labeled)
    Annotation.objects.filter(pk=labeled.pk).update(total_time_ms=1)  # another change of the row
    writes = statements.RowWrites()
    writes.update(Completion, completion.pk, rating=1)
    writes.update(Annotation, labeled.pk, total_time_ms=2)
    assert writes.write(if_version=(Annotation, labeled.pk, version)) is False
    assert (Completion.objects.get(pk=completion.pk).rating, Annotation.objects.get(pk=labeled.pk).total_time_ms) \
        == (None, 1)
    writes.update(Completion, completion.pk, rating=1)
    writes.update(Annotation, labeled.pk, total_time_ms=2)
    assert writes.write(if_version=(Annotation, labeled.pk, xmin_of(labeled))) is True
    assert (Completion.objects.get(pk=completion.pk).rating, Annotation.objects.get(pk=labeled.pk).total_time_ms) \
        == (1, 2)
