"""The SampleLine backfill (migration 0010_d): solutions imported before sample lines were
recorded get their line, so the next file with the same response counts a second sample.

Driven with Django's MigrationExecutor, as Django's own migration tests are: the database is
taken back to before SampleLine existed, filled as the importer filled it then, and brought
forward again.
"""
import json

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from annotate.models import Problem, Project, SampleLine, Solution
from annotate.pool import importing

# Migrations run outside a test transaction.
pytestmark = [pytest.mark.embedded, pytest.mark.django_db(transaction=True)]

BEFORE_SAMPLE_LINES = ("annotate", "0004_importjob_split_mode")
BEFORE_BACKFILL = ("annotate", "0009_auto_labels")
BACKFILL = ("annotate", "0010_d_backfill_sample_lines")

STATEMENT, ANSWER = "What is 2 + 3?", "5"
STEPS = ["2 + 3 = 5.", "# Answer\n\n5"]


def migrate(target: tuple[str, str]):
    """Migrate the test database to `target`; the historical models there."""
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return MigrationExecutor(connection).loader.project_state([target]).apps


def migrate_to_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.fixture
def back_to_latest():
    yield
    migrate_to_latest()  # the next tests need the whole schema, whatever this one left


def old_solution(apps, steps: list[str], *, prm800k_label: bool = False):
    """A solution (and its problem) as the importer wrote it, hashed as it hashes them today."""
    problem_hash = Problem.hash_for(STATEMENT, ANSWER)
    problem, _ = apps.get_model("annotate", "Problem").objects.get_or_create(
        content_hash=problem_hash, defaults={"statement": STATEMENT, "ground_truth_answer": ANSWER},
    )
    solution = apps.get_model("annotate", "Solution").objects.create(
        problem=problem, final_answer=ANSWER, is_correct=True, source="generic",
        content_hash=Solution.hash_for(problem_hash, steps),
    )
    for index, text in enumerate(steps):
        apps.get_model("annotate", "Step").objects.create(solution=solution, index=index, text=text)
    if prm800k_label:  # a PRM800K line: its labeler's annotation, no local annotator
        apps.get_model("annotate", "Annotation").objects.create(solution=solution, labeler="prm800k-1",
                                                                status="submitted", finish_reason="solution")
    return solution.pk


@pytest.mark.slow
def test_a_solution_imported_before_sample_lines_gets_its_line_and_the_next_file_counts_a_second_sample(
    back_to_latest, tmp_path
):
    old = migrate(BEFORE_SAMPLE_LINES)
    imported = old_solution(old, STEPS)
    labeled = old_solution(old, ["2 + 3 = 5.", "# Answer\n\n5 (PRM800K)"], prm800k_label=True)
    later = migrate(BEFORE_BACKFILL)
    # Made after sample lines existed, not by the importer (a benchmark's pool): never a sample.
    made_otherwise = old_solution(later, ["5.", "# Answer\n\n5"])

    backfilled = migrate(BACKFILL)  # the tables as they were then: read through that state's models
    assert list(SampleLine.objects.values_list("solution_id", "line_no")) == [(imported, imported)]
    assert SampleLine.objects.get().file_name == "(imported before sample lines were recorded)"
    assert backfilled.get_model("annotate", "Solution").objects.get(pk=imported).sample_count == 1
    assert not SampleLine.objects.filter(solution_id__in=[labeled, made_otherwise]).exists()

    # The consumer: the importer, given the same response in another file, counts two samples.
    migrate_to_latest()  # today's importer needs today's tables
    other = tmp_path / "more-samples.jsonl"
    other.write_text(json.dumps({"problem": STATEMENT, "ground_truth_answer": ANSWER, "steps": STEPS}) + "\n")
    summary = importing.import_pool(project=Project.objects.sole(), path=other, format="generic")
    assert (summary.created, summary.duplicates) == (0, 1)
    assert Solution.objects.get(pk=imported).sample_count == 2


@pytest.mark.slow
def test_the_backfill_is_undone_by_migrating_back(back_to_latest):
    old = migrate(BEFORE_SAMPLE_LINES)
    imported = old_solution(old, STEPS)
    migrate(BACKFILL)
    assert SampleLine.objects.filter(solution_id=imported).count() == 1
    apps = migrate(BEFORE_BACKFILL)
    assert not apps.get_model("annotate", "SampleLine").objects.exists()
    assert apps.get_model("annotate", "Solution").objects.get(pk=imported).sample_count == 1
