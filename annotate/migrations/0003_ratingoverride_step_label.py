"""A reviewer's override belongs to a step: of its chosen completion, or of its human completion."""
import django.db.models.deletion
from django.db import migrations, models


def fill_step_labels(apps, schema_editor):
    RatingOverride = apps.get_model("annotate", "RatingOverride")
    Completion = apps.get_model("annotate", "Completion")
    step_label = Completion.objects.filter(pk=models.OuterRef("completion_id")).values("step_label_id")[:1]
    RatingOverride.objects.update(step_label_id=models.Subquery(step_label))


class Migration(migrations.Migration):

    dependencies = [
        ("annotate", "0002_ws_labeling_config_overrides"),
    ]

    operations = [
        migrations.AddField(
            model_name="ratingoverride",
            name="step_label",
            field=models.ForeignKey(
                null=True, on_delete=django.db.models.deletion.CASCADE, related_name="overrides",
                to="annotate.steplabel",
            ),
        ),
        migrations.RunPython(fill_step_labels, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="ratingoverride",
            name="step_label",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="overrides", to="annotate.steplabel"
            ),
        ),
        migrations.AlterField(
            model_name="ratingoverride",
            name="completion",
            field=models.ForeignKey(
                blank=True, help_text="The completion whose rating changed; empty for the step's human completion",
                null=True, on_delete=django.db.models.deletion.CASCADE, related_name="overrides",
                to="annotate.completion",
            ),
        ),
    ]
