"""A project's current model is its CurrentModel row (0013 copied the one current version into the
default project's): the site-wide `is_current` flag and its one-row index go."""

from django.db import migrations


def flag_the_default_projects_current_model(apps, schema_editor):
    """Backwards: the default project's current model is the one flagged current again."""
    current = apps.get_model("scoring", "CurrentModel").objects.filter(project__slug="default").first()
    if current is not None:
        apps.get_model("scoring", "ModelVersion").objects.filter(pk=current.model_version_id).update(is_current=True)


class Migration(migrations.Migration):

    dependencies = [
        ("scoring", "0013_projects"),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, flag_the_default_projects_current_model),
        migrations.RemoveConstraint(
            model_name="modelversion",
            name="one_current_model",
        ),
        migrations.RemoveField(
            model_name="modelversion",
            name="is_current",
        ),
    ]
