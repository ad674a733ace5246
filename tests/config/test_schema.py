"""The database schema as migrated: what the models say, and no index that another makes redundant.

Every index is written at each insert and at each update that cannot stay on its page (a claim,
a submit, a rescore's scores); one whose columns begin another index or unique constraint of
its table answers no lookup that one does not, so it only costs.
"""
import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection

pytestmark = pytest.mark.django_db

OWN_APPS = ("annotate", "scoring")


@pytest.mark.embedded
def test_the_migrations_hold_everything_the_models_say():
    call_command("makemigrations", *OWN_APPS, "--check", "--dry-run", verbosity=0)


def indexed_columns(table: str) -> dict[str, tuple[tuple[str, ...], bool]]:
    """Each index of `table` (those behind unique constraints too): (its columns, whether unique)."""
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, table)
    return {name: (tuple(c["columns"]), bool(c["unique"])) for name, c in found.items()
            if c["index"] or (c["unique"] and not c["primary_key"])}


def covered_indexes(table: str) -> list[str]:
    """Non-unique indexes whose columns are the first columns of another index of the table."""
    indexes = indexed_columns(table)
    return [f"{name} {columns} is the start of {other} {longer}"
            for name, (columns, unique) in indexes.items() if not unique
            for other, (longer, _) in indexes.items()
            if other != name and len(longer) > len(columns) and longer[:len(columns)] == columns]


# On PostgreSQL: the same migrations make both stores' schemas, and Django's SQLite introspection
# cannot read a table with a CHECK (x IN (-1, 0, 1)) constraint (annotate_completion).
@pytest.mark.postgresql
def test_no_index_of_ours_is_the_start_of_another():
    tables = sorted({model._meta.db_table for label in OWN_APPS for model in apps.get_app_config(label).get_models()})
    assert [found for table in tables for found in covered_indexes(table)] == []


@pytest.mark.postgresql
def test_a_lookup_by_a_foreign_key_still_has_an_index_to_use():
    """The dropped ones' columns lead a unique constraint: deleting a solution, or reading its
    steps and scores, finds the rows from an index, not by reading the table."""
    needed = {"annotate_step": "solution_id", "annotate_steplabel": "annotation_id",
              "annotate_completion": "step_label_id", "annotate_queueitem": "solution_id",
              "annotate_annotation": "solution_id", "scoring_stepscore": "step_id",
              "scoring_solutionscore": "solution_id"}
    for table, column in needed.items():
        assert any(columns[0] == column for columns, _ in indexed_columns(table).values()), table


@pytest.mark.postgresql
def test_no_text_column_keeps_an_index_only_a_like_lookup_uses():
    """Django adds a pattern-ops index beside an indexed text column for LIKE 'prefix%'; no
    Stepwise query makes one (startswith, contains), so it would only be written."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                       "AND indexdef LIKE '%%_pattern_ops%%' AND (tablename LIKE 'annotate\\_%%' "
                       "OR tablename LIKE 'scoring\\_%%')")
        assert cursor.fetchall() == []
