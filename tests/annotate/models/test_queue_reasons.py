"""Why an item is queued: one list of reasons, QueueItem.Reason, the column's choices; the
labeling side and selection (scoring) write only those, and the shares setting names only
selection's own."""
import importlib

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from annotate.labeling import queueing
from annotate.models import QueueItem
from scoring.rescoring import selection
from tests.conftest import REPO_ROOT
from tests.factories import SolutionFactory


def test_every_reason_either_side_writes_is_one_of_the_columns_choices():
    choices = {value for value, _ in QueueItem._meta.get_field("reason").choices}
    labeling = {queueing.DEFAULT_REASON, queueing.IMPORTED_REASON, queueing.IMPORTED_WRONG_REASON,
                queueing.SCREENING_REASON}
    assert set(selection.REASONS) | labeling == choices == set(QueueItem.Reason.values)
    assert selection.ENSEMBLE_REASONS <= set(selection.REASONS)
    assert not labeling & set(selection.REASONS)  # a share can name no reason of the labeling side


def test_the_ground_floor_names_no_reason():
    source = (REPO_ROOT / "infra" / "env.py").read_text()
    assert not [reason for reason in selection.REASONS if f'"{reason}"' in source]


@pytest.mark.django_db
def test_the_reason_column_refuses_an_unknown_reason():
    item = QueueItem(solution=SolutionFactory(), generation=0, reason="lucky")
    with pytest.raises(ValidationError) as refused:
        item.full_clean()
    assert "reason" in refused.value.message_dict
    item.reason = QueueItem.Reason.CONVINCING_WRONG
    item.full_clean()


@pytest.mark.django_db
def test_enqueue_refuses_an_unknown_reason_and_writes_nothing():
    known, unknown = SolutionFactory(), SolutionFactory()
    generation = queueing.start_generation()
    with pytest.raises(ValueError, match="'lucky' is not a valid"):
        picks = [(known.pk, 2.0, "random", None), (unknown.pk, 1.0, "lucky", None)]
        queueing.enqueue(generation=generation, picks=picks)
    assert not QueueItem.objects.exists()
    queueing.enqueue(generation=generation, picks=[(known.pk, 2.0, "random", None)])
    assert list(QueueItem.objects.values_list("reason", flat=True)) == [QueueItem.Reason.RANDOM]


def test_the_shares_setting_names_only_selections_reasons():
    selection.check_shares_setting({"convincing_wrong": 0.5, "random": 0.5})
    with pytest.raises(ImproperlyConfigured, match="STEPWISE_SELECTION_SHARES: unknown reason 'screening'"):
        selection.check_shares_setting({"screening": 1.0})
    with pytest.raises(ValueError, match="unknown reason 'default order'"):
        selection.parse_shares("default order=1")


@pytest.mark.django_db(transaction=True)  # SQLite's schema editor cannot run inside a test's transaction
def test_the_choices_migration_changes_no_table():
    before = MigrationExecutor(connection).loader.project_state(("annotate", "0019_step_model_view_read_from_scores"))
    migration = importlib.import_module("annotate.migrations.0020_reason_and_rating_choices").Migration
    with connection.schema_editor(collect_sql=True) as editor:
        migration("0020_reason_and_rating_choices", "annotate").apply(before, editor, collect_sql=True)
    assert [sql for sql in editor.collected_sql if not sql.startswith("--")] == []
