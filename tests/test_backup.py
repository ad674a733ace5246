"""The backup and restore drill of the README, run as written: dump, restore into an empty database,
and every label is there with equal checksums (the PRM800K export's bytes, an ordered listing of
the label rows, and every table's row count)."""
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.apps import apps
from django.conf import settings

from annotate.labeling import actions as labeling
from annotate.labeling import queueing, reviewing
from annotate.models import Annotation, Completion, StepLabel
from tests.annotations import PHASE1_LINE, PHASE2_LINE, import_lines
from tests.conftest import REPO_ROOT, _test_database_url, worker_environment
from tests.factories import SolutionFactory, user_with_role

# What a label is: the annotation, each step's label and each rated completion, in order.
LABEL_ROWS = f"""
    SELECT a.id, a.labeler, a.status, a.finish_reason, a.finish_note, a.total_time_ms, a.generation,
           sl."index", sl.chosen_completion, sl.human_completion, c."index", c.text, c.rating, c.flagged
    FROM {Annotation._meta.db_table} a
    JOIN {StepLabel._meta.db_table} sl ON sl.annotation_id = a.id
    JOIN {Completion._meta.db_table} c ON c.step_label_id = sl.id
    ORDER BY a.id, sl."index", c."index"
"""


def label_checksum(rows) -> str:
    return hashlib.md5("\n".join(json.dumps(row, default=str) for row in rows).encode()).hexdigest()


def table_names() -> list[str]:
    return sorted(model._meta.db_table for model in apps.get_models())


def export_checksum(database_url: str, out: Path) -> str:
    """md5 of the PRM800K export of every label (QC included), made by the app on `database_url`."""
    env = {**worker_environment(), "DATABASE_URL": database_url}
    subprocess.run([sys.executable, "manage.py", "export_prm800k", str(out), "--include-qc"],
                   cwd=REPO_ROOT, env=env, check=True, capture_output=True)
    return hashlib.md5(out.read_bytes()).hexdigest()


def make_labels(tmp_path: Path) -> None:
    """Labels of every origin: imported PRM800K lines, an annotator's own task with a note, an override."""
    import_lines(tmp_path, [PHASE1_LINE, PHASE2_LINE])
    SolutionFactory(steps=["2 + 2 = 4.", "# Answer\n\n4"])
    queueing.ensure_default_queue()
    annotator = user_with_role("backup-ann", "annotator")
    task = queueing.claim_next(annotator=annotator)
    labeling.rate(annotation=task, index=0, rating=1)
    labeling.submit(annotation=task, finish_reason="give_up", note="unsure about step 2")
    reviewing.override_rating(annotation=task, index=0, rating=0, reviewer=user_with_role("backup-rev", "reviewer"),
                              note="neutral")
    assert Annotation.objects.count() == 3


def run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=300)


@pytest.mark.postgresql
def test_pg_dump_and_pg_restore_into_an_empty_database_keep_every_label(transactional_db, tmp_path):
    make_labels(tmp_path)
    source_url = _test_database_url()
    restored_url = source_url.rsplit("/", 1)[0] + "/" + settings.DATABASES["default"]["NAME"] + "_restored"
    dump = tmp_path / "stepwise.dump"
    # The README's sequence.
    run("pg_dump", "--format=custom", "--no-owner", f"--dbname={source_url}", f"--file={dump}")
    run("dropdb", "--if-exists", f"--maintenance-db={source_url}", restored_url.rsplit("/", 1)[1])
    run("createdb", f"--maintenance-db={source_url}", restored_url.rsplit("/", 1)[1])
    try:
        run("pg_restore", "--no-owner", "--exit-on-error", "--single-transaction", f"--dbname={restored_url}",
            str(dump))
        with psycopg.connect(source_url) as source, psycopg.connect(restored_url) as restored:
            assert label_checksum(restored.execute(LABEL_ROWS)) == label_checksum(source.execute(LABEL_ROWS))
            rows = restored.execute(LABEL_ROWS).fetchall()
            assert len(rows) == Completion.objects.count() and {row[0] for row in rows} == set(
                Annotation.objects.values_list("id", flat=True))
            for table in table_names():
                count = f"SELECT count(*) FROM {table}"
                assert restored.execute(count).fetchone() == source.execute(count).fetchone(), table
        assert export_checksum(restored_url, tmp_path / "restored.jsonl") == export_checksum(
            source_url, tmp_path / "source.jsonl")
    finally:
        run("dropdb", "--if-exists", f"--maintenance-db={source_url}", restored_url.rsplit("/", 1)[1])


@pytest.mark.slow
def test_a_sqlite_backup_keeps_every_label(tmp_path):
    """The embedded default's drill: migrate and fill a SQLite file, back it up with SQLite's backup API."""
    source = tmp_path / "stepwise.sqlite3"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{source}"}
    lines = tmp_path / "prm800k.jsonl"
    lines.write_text("".join(json.dumps(line) + "\n" for line in (PHASE1_LINE, PHASE2_LINE)))
    for command in (["migrate", "--no-input"], ["import_pool", str(lines), "--format", "prm800k"]):
        subprocess.run([sys.executable, "manage.py", *command], cwd=REPO_ROOT, env=env, check=True,
                       capture_output=True, timeout=300)
    backup = tmp_path / "backup.sqlite3"
    # The README's one line (the same backup API as the sqlite3 shell's `.backup`): consistent
    # while the app writes, WAL included.
    subprocess.run([sys.executable, "-c", "import sqlite3, sys; "
                    "sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))", str(source), str(backup)],
                   check=True, timeout=60)
    with sqlite3.connect(source) as original, sqlite3.connect(backup) as copy:
        rows = original.execute(LABEL_ROWS).fetchall()
        assert len(rows) >= 5 and label_checksum(copy.execute(LABEL_ROWS)) == label_checksum(rows)
        for table in table_names():
            count = f"SELECT count(*) FROM {table}"
            assert copy.execute(count).fetchone() == original.execute(count).fetchone(), table
    assert export_checksum(f"sqlite:///{backup}", tmp_path / "b.jsonl") == export_checksum(
        f"sqlite:///{source}", tmp_path / "a.jsonl")
