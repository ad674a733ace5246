"""The periodic retrain task, so a fresh install retrains on schedule (edit it in the admin).

Same name and task as scoring.learning.retraining.ensure_schedule, which leaves an existing one alone.
"""
import json

from django.db import migrations


def create_schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    interval, _ = IntervalSchedule.objects.get_or_create(every=30, period="minutes")
    PeriodicTask.objects.get_or_create(
        name="stepwise: retrain the PRM when enough new labels exist",
        defaults={"task": "scoring.tasks.scheduled_retrain_task", "interval": interval, "queue": "ml",
                  "kwargs": json.dumps({"min_new_labels": 50})},
    )


def remove_schedule(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name="stepwise: retrain the PRM when enough new labels exist").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("scoring", "0003_tr_training_run_slot"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create_schedule, remove_schedule)]
