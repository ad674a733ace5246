"""Backfill a SampleLine for each solution imported before SampleLines were recorded (0005).

The importer's writer (`annotate.pool.importing.writing._record_samples`) records every line that
brings a solution, except a PRM800K line (another labeler's annotation, not a sample), as a
SampleLine keyed on (file digest, line number), and sets `sample_count` by counting those rows.
A solution imported before 0005 has no row for the line that brought it, so the next file
with the same response recounted it to 1 instead of 2. Which file and line brought it was
never stored, so its line gets a key of its own, the way a generation run's samples do
(`scoring.generation.runs.run_digest`): one frozen digest standing for "the pool before sample
lines", and the solution's id as the line number. Its count is then recounted from its rows,
as the writer does.

The rule is frozen here rather than imported: a migration must do the same thing on every
database, whatever the importer's code becomes. What the writer's rule decided then:
- a solution gets a line when it came from an imported line that was not PRM800K's: it has
  no SampleLine yet and no imported annotation (a PRM800K label: no local annotator);
- a solution made any other way after 0005 (a benchmark's, a simulation's) was never a
  sample and gets none: only solutions created before 0005 was applied are backfilled.

Known limits, both from the digest that was never recorded: a solution that already has a
line (its response came again after 0005) is left as it is, since that line may be its own
file imported again and counting it twice would be worse than once; and a file imported
before 0005 and imported again after this migration counts each of its lines once more.
"""
import hashlib

from django.db import migrations
from django.db.migrations.recorder import MigrationRecorder
from django.db.models import Count, Exists, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce

BACKFILL_DIGEST = hashlib.sha256(b"stepwise: solutions imported before sample lines were recorded").hexdigest()
BACKFILL_FILE_NAME = "(imported before sample lines were recorded)"
SAMPLE_LINES_INTRODUCED = "0005_sample_count_and_import_queue"
CHUNK = 5000


def sample_lines_introduced_at(connection):
    """When 0005 was applied here (None when it is not recorded: then every solution predates it)."""
    applied = MigrationRecorder(connection).migration_qs.filter(app="annotate", name=SAMPLE_LINES_INTRODUCED)
    return applied.values_list("applied", flat=True).first()


def solutions_without_their_line(apps, connection):
    Solution = apps.get_model("annotate", "Solution")
    SampleLine = apps.get_model("annotate", "SampleLine")
    Annotation = apps.get_model("annotate", "Annotation")
    solutions = (
        Solution.objects.exclude(Exists(SampleLine.objects.filter(solution=OuterRef("pk"))))
        .exclude(Exists(Annotation.objects.filter(solution=OuterRef("pk"), annotator__isnull=True)))
    )
    introduced = sample_lines_introduced_at(connection)
    if introduced is not None:
        solutions = solutions.filter(created_at__lt=introduced)
    return list(solutions.order_by("pk").values_list("pk", flat=True))


def recount(apps, solution_ids, *, empty: int) -> None:
    """`sample_count` from the SampleLine rows, as the writer sets it (`empty` when there are none)."""
    Solution = apps.get_model("annotate", "Solution")
    SampleLine = apps.get_model("annotate", "SampleLine")
    lines = (
        SampleLine.objects.filter(solution=OuterRef("pk")).order_by().values("solution")
        .annotate(n=Count("pk")).values("n")
    )
    for start in range(0, len(solution_ids), CHUNK):
        chunk = solution_ids[start:start + CHUNK]
        Solution.objects.filter(pk__in=chunk).update(sample_count=Coalesce(Subquery(lines), Value(empty)))


def backfill(apps, schema_editor) -> None:
    SampleLine = apps.get_model("annotate", "SampleLine")
    missing = solutions_without_their_line(apps, schema_editor.connection)
    for start in range(0, len(missing), CHUNK):
        SampleLine.objects.bulk_create(
            SampleLine(solution_id=pk, file_digest=BACKFILL_DIGEST, line_no=pk, file_name=BACKFILL_FILE_NAME)
            for pk in missing[start:start + CHUNK]
        )
    recount(apps, missing, empty=1)


def remove_backfill(apps, schema_editor) -> None:
    SampleLine = apps.get_model("annotate", "SampleLine")
    backfilled = SampleLine.objects.filter(file_digest=BACKFILL_DIGEST)
    solution_ids = sorted(set(backfilled.values_list("solution_id", flat=True)))
    backfilled.delete()
    recount(apps, solution_ids, empty=1)  # a solution with no line left is one sample, as before


class Migration(migrations.Migration):

    dependencies = [
        ("annotate", "0009_auto_labels"),
    ]

    operations = [
        migrations.RunPython(backfill, remove_backfill),
    ]
