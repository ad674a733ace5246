"""Repair `chosen_completion` of tasks submitted before the rule of rewritten steps
(`annotate.labeling.verdicts.chosen_at_submit`).

Submit marked every kept step but the last as chosen. With written corrections on and
stop-at-first-error off, an annotator rates a step -1, writes the step as it should be and goes
on; that step was stored chosen (completion 0, rated -1) beside its human completion, so the
PRM800K line said the path went on from the rejected text, and every verdict read the -1 and
dropped the rewrite and the steps after it. The last step of such a found_error task, rated
good, was stored unchosen, as if the task had stopped at an error there.

For tasks labeled here (a local annotator or a queue item; imported lines are left as they
were read), submitted:
- a step with a human completion is not chosen: the path went on from the human completion;
- the last step of a found_error task, not rewritten and not rated -1, is chosen (0).

The rule is frozen here rather than imported: a migration must do the same on every database.
"""
from django.db import migrations
from django.db.models import Max, OuterRef, Q, Subquery


def repair(apps, schema_editor):
    Annotation = apps.get_model("annotate", "Annotation")
    StepLabel = apps.get_model("annotate", "StepLabel")
    local = Annotation.objects.filter(status="submitted").filter(
        Q(annotator__isnull=False) | Q(queue_item__isnull=False)
    )
    StepLabel.objects.filter(annotation__in=local, human_completion__isnull=False,
                             chosen_completion__isnull=False).update(chosen_completion=None)
    last_index = StepLabel.objects.filter(annotation=OuterRef("annotation")).values("annotation").annotate(
        last=Max("index")).values("last")
    StepLabel.objects.filter(
        annotation__in=local.filter(finish_reason="found_error"), index=Subquery(last_index),
        chosen_completion__isnull=True, human_completion__isnull=True,
        completions__index=0, completions__rating__in=(0, 1),
    ).update(chosen_completion=0)


class Migration(migrations.Migration):

    dependencies = [
        ("annotate", "0013_exportjob_report"),
    ]

    operations = [
        migrations.RunPython(repair, migrations.RunPython.noop),
    ]
