"""The current version's step scores onto annotate's new `Step.model_p` (dropped again in annotate 0019),
so an assisted project shows the model's view of a pool scored before the column existed."""
from django.db import migrations
from django.db.models import OuterRef, Subquery


def hand_down(apps, schema_editor):
    Step = apps.get_model("annotate", "Step")
    StepScore = apps.get_model("scoring", "StepScore")
    current = StepScore.objects.filter(step_id=OuterRef("pk"), model_version__is_current=True).values("p")[:1]
    Step.objects.filter(scores__model_version__is_current=True).update(model_p=Subquery(current))


class Migration(migrations.Migration):

    dependencies = [
        ("annotate", "0016_assistance"),
        ("scoring", "0009_model_version_not_enough_evidence"),
    ]

    operations = [migrations.RunPython(hand_down, migrations.RunPython.noop)]
