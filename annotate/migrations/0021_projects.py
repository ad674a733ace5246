"""Projects: every existing row goes into one project named `default`.

Its settings are today's labeling settings (row 1) with the campaign policies the environment
holds now (queue size and per-problem cap, selection shares, promotion thresholds, lease), and
each member of a role group becomes a member of it in that role (the highest, when several).
"""

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import annotate.models.project
import annotate.models.projects

PROJECT_TABLES = ["annotation", "autolabelrun", "exportjob", "generation", "importjob", "problem", "queueitem",
                  "screeningresult", "solution"]
ROLE_ORDER = ["annotator", "reviewer", "admin"]


def put_everything_in_the_default_project(apps, schema_editor):
    Project = apps.get_model("annotate", "Project")
    project, _ = Project.objects.get_or_create(slug="default", defaults={"name": "Default"})
    for table in PROJECT_TABLES:
        apps.get_model("annotate", table).objects.filter(project__isnull=True).update(project=project)
    _copy_settings(apps, project)
    _groups_to_memberships(apps, project)


def _copy_settings(apps, project):
    LabelingConfig = apps.get_model("annotate", "LabelingConfig")
    config = LabelingConfig.objects.filter(pk=1).first() or LabelingConfig.objects.order_by("pk").first()
    if config is None:
        config = LabelingConfig(lease_seconds=0)
    config.project = project
    config.lease_seconds = config.lease_seconds or settings.STEPWISE_LEASE_SECONDS
    config.queue_size = settings.STEPWISE_QUEUE_SIZE
    config.queue_per_problem = settings.STEPWISE_QUEUE_PER_PROBLEM
    config.selection_shares = dict(settings.STEPWISE_SELECTION_SHARES)
    config.promotion_min_gain = settings.STEPWISE_PROMOTION_MIN_GAIN
    config.promotion_min_solutions = settings.STEPWISE_PROMOTION_MIN_SOLUTIONS
    config.promotion_min_steps = settings.STEPWISE_PROMOTION_MIN_STEPS
    config.save()
    LabelingConfig.objects.exclude(pk=config.pk).delete()


def _groups_to_memberships(apps, project):
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    Membership = apps.get_model("annotate", "Membership")
    for user in User.objects.filter(groups__name__in=ROLE_ORDER).distinct():
        names = set(user.groups.values_list("name", flat=True))
        role = max((r for r in ROLE_ORDER if r in names), key=ROLE_ORDER.index)
        Membership.objects.get_or_create(project=project, user=user, defaults={"role": role})


class Migration(migrations.Migration):

    dependencies = [
        ('annotate', '0020_reason_and_rating_choices'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Membership',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('role', models.CharField(choices=[('annotator', 'annotator'), ('reviewer', 'reviewer'), ('admin', 'project admin')], max_length=20)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.CreateModel(
            name='Project',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=200)),
                ('slug', models.CharField(help_text="In the project's URLs (/p/<slug>/) and the commands' --project", max_length=50, validators=[django.core.validators.RegexValidator('^[a-z0-9][a-z0-9-]{0,48}$', 'a slug is lowercase letters, digits and hyphens, starting with a letter or digit')])),
                ('description', models.TextField(blank=True)),
                ('guideline', models.TextField(blank=True, help_text='What annotators are asked to do, shown on the labeling page')),
                ('guideline_version', models.PositiveIntegerField(default=1, help_text='Stamped on every annotation; raised each time the guideline text changes')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
            options={
                'ordering': ['name'],
            },
        ),
        migrations.CreateModel(
            name='SettingsChange',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('field', models.CharField(max_length=100)),
                ('old_value', models.TextField(blank=True)),
                ('new_value', models.TextField(blank=True)),
                ('changed_at', models.DateTimeField(auto_now_add=True)),
            ],
            options={
                'ordering': ['-changed_at', '-id'],
            },
        ),
        migrations.AlterModelOptions(
            name='labelingconfig',
            options={'verbose_name': 'project settings', 'verbose_name_plural': 'project settings'},
        ),
        migrations.RemoveIndex(
            model_name='annotation',
            name='annotation_annotator_gen',
        ),
        migrations.RemoveIndex(
            model_name='queueitem',
            name='annotate_qu_status_111984_idx',
        ),
        migrations.AddField(
            model_name='annotation',
            name='guideline_version',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='labelingconfig',
            name='promotion_min_gain',
            field=models.FloatField(default=annotate.models.project._promotion_min_gain, help_text="A new model is promoted when its gain's lower bound is above this"),
        ),
        migrations.AddField(
            model_name='labelingconfig',
            name='promotion_min_solutions',
            field=models.PositiveIntegerField(default=annotate.models.project._promotion_min_solutions, help_text='Held-out labeled solutions the promotion gate needs to decide', validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AddField(
            model_name='labelingconfig',
            name='promotion_min_steps',
            field=models.PositiveIntegerField(default=annotate.models.project._promotion_min_steps, help_text='Held-out labeled steps the promotion gate needs to decide', validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AddField(
            model_name='labelingconfig',
            name='queue_per_problem',
            field=models.PositiveIntegerField(default=annotate.models.project._queue_per_problem, help_text='At most this many queued solutions of one problem per generation', validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AddField(
            model_name='labelingconfig',
            name='queue_size',
            field=models.PositiveIntegerField(default=annotate.models.project._queue_size, help_text='Solutions queued per generation (before overlap)', validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AddField(
            model_name='labelingconfig',
            name='rescreen_on_guideline_change',
            field=models.BooleanField(default=False, help_text='A new guideline version asks every annotator to pass the screening set again'),
        ),
        migrations.AddField(
            model_name='labelingconfig',
            name='selection_shares',
            field=models.JSONField(default=annotate.models.project._selection_shares, help_text='Share of the queue each selection fills after a rescore, e.g. {"convincing_wrong": 0.5, "random": 0.5}'),
        ),
        migrations.AlterField(
            model_name='generation',
            name='number',
            field=models.IntegerField(),
        ),
        migrations.AlterField(
            model_name='labelingconfig',
            name='lease_seconds',
            field=models.PositiveIntegerField(default=annotate.models.project._lease_seconds, help_text="How long a served task stays the annotator's without a heartbeat", validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AlterField(
            model_name='problem',
            name='content_hash',
            field=models.CharField(max_length=64),
        ),
        migrations.AlterField(
            model_name='screeningresult',
            name='annotator',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='screening_results', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='solution',
            name='content_hash',
            field=models.CharField(max_length=64),
        ),
        migrations.AddField(
            model_name='membership',
            name='user',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='membership',
            name='project',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='annotation',
            name='project',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='autolabelrun',
            name='project',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='exportjob',
            name='project',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='generation',
            name='project',
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='importjob',
            name='project',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='labelingconfig',
            name='project',
            field=models.OneToOneField(null=True, on_delete=django.db.models.deletion.CASCADE, related_name='labeling_config', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='problem',
            name='project',
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='queueitem',
            name='project',
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='screeningresult',
            name='project',
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='solution',
            name='project',
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AddIndex(
            model_name='annotation',
            index=models.Index(fields=['annotator', 'project', 'generation', 'is_quality_control'], name='annotation_annotator_gen'),
        ),
        migrations.AddIndex(
            model_name='queueitem',
            index=models.Index(fields=['project', 'status', '-priority', 'id'], name='queue_claim_order'),
        ),
        migrations.AddConstraint(
            model_name='generation',
            constraint=models.UniqueConstraint(fields=('project', 'number'), name='unique_generation_number'),
        ),
        migrations.AddConstraint(
            model_name='problem',
            constraint=models.UniqueConstraint(fields=('project', 'content_hash'), name='unique_problem_content'),
        ),
        migrations.AddConstraint(
            model_name='screeningresult',
            constraint=models.UniqueConstraint(fields=('project', 'annotator'), name='one_screening_result'),
        ),
        migrations.AddConstraint(
            model_name='solution',
            constraint=models.UniqueConstraint(fields=('project', 'content_hash'), name='unique_solution_content'),
        ),
        migrations.AddField(
            model_name='settingschange',
            name='project',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='settings_changes', to='annotate.project'),
        ),
        migrations.AddField(
            model_name='settingschange',
            name='user',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddConstraint(
            model_name='project',
            constraint=models.UniqueConstraint(fields=('slug',), name='unique_project_slug'),
        ),
        migrations.AddConstraint(
            model_name='membership',
            constraint=models.UniqueConstraint(fields=('project', 'user'), name='one_membership_per_project'),
        ),
        migrations.RunPython(put_everything_in_the_default_project, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='labelingconfig',
            name='project',
            field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='labeling_config', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='annotation',
            name='project',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='autolabelrun',
            name='project',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='exportjob',
            name='project',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='generation',
            name='project',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='importjob',
            name='project',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='problem',
            name='project',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='queueitem',
            name='project',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='screeningresult',
            name='project',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='solution',
            name='project',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='annotation',
            name='project',
            field=models.ForeignKey(default=annotate.models.projects.sole_project_id, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='autolabelrun',
            name='project',
            field=models.ForeignKey(default=annotate.models.projects.sole_project_id, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='exportjob',
            name='project',
            field=models.ForeignKey(default=annotate.models.projects.sole_project_id, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='generation',
            name='project',
            field=models.ForeignKey(db_index=False, default=annotate.models.projects.sole_project_id, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='importjob',
            name='project',
            field=models.ForeignKey(default=annotate.models.projects.sole_project_id, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='problem',
            name='project',
            field=models.ForeignKey(db_index=False, default=annotate.models.projects.sole_project_id, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='queueitem',
            name='project',
            field=models.ForeignKey(db_index=False, default=annotate.models.projects.sole_project_id, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='screeningresult',
            name='project',
            field=models.ForeignKey(db_index=False, default=annotate.models.projects.sole_project_id, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
        migrations.AlterField(
            model_name='solution',
            name='project',
            field=models.ForeignKey(db_index=False, default=annotate.models.projects.sole_project_id, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='annotate.project'),
        ),
    ]
