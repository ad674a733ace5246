"""Projects: model versions and jobs go into the `default` project (annotate 0021), and the one
current model becomes the default project's current model."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import annotate.models.projects


def put_models_and_jobs_in_the_default_project(apps, schema_editor):
    project = apps.get_model("annotate", "Project").objects.get(slug="default")
    for table in ["generationrun", "rescorejob", "rolloutlabeljob", "trainingrun", "modelversion"]:
        apps.get_model("scoring", table).objects.filter(project__isnull=True).update(project=project)
    current = apps.get_model("scoring", "ModelVersion").objects.filter(is_current=True).first()
    if current is not None:
        apps.get_model("scoring", "CurrentModel").objects.update_or_create(
            project=project, defaults={"model_version": current})


class Migration(migrations.Migration):

    dependencies = [
        ('annotate', '0021_projects'),
        ('scoring', '0012_unused_like_indexes'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='CurrentModel',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('since', models.DateTimeField(auto_now=True)),
            ],
        ),
        migrations.AddField(
            model_name='generationrun',
            name='project',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='modelversion',
            name='project',
            field=models.ForeignKey(blank=True, help_text='The project it was trained or registered in; empty: a public PRM', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='rescorejob',
            name='project',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='rolloutlabeljob',
            name='project',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='trainingrun',
            name='project',
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='trainingrun',
            name='active_slot',
            field=models.PositiveSmallIntegerField(blank=True, default=1, editable=False, null=True),
        ),
        migrations.AddConstraint(
            model_name='trainingrun',
            constraint=models.UniqueConstraint(fields=('project', 'active_slot'), name='one_training_run_per_project'),
        ),
        migrations.AddField(
            model_name='currentmodel',
            name='model_version',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='current_in', to='scoring.modelversion'),
        ),
        migrations.AddField(
            model_name='currentmodel',
            name='project',
            field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='current_model', to='annotate.project'),
        ),
        migrations.RunPython(put_models_and_jobs_in_the_default_project, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='generationrun',
            name='project',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='rescorejob',
            name='project',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='rolloutlabeljob',
            name='project',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='trainingrun',
            name='project',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='generationrun',
            name='project',
            field=models.ForeignKey(default=annotate.models.projects.sole_project_id, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='rescorejob',
            name='project',
            field=models.ForeignKey(default=annotate.models.projects.sole_project_id, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='rolloutlabeljob',
            name='project',
            field=models.ForeignKey(default=annotate.models.projects.sole_project_id, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='trainingrun',
            name='project',
            field=models.ForeignKey(db_index=False, default=annotate.models.projects.sole_project_id, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
    ]
