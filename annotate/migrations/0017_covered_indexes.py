import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# Indexes whose column is the first of a unique constraint or an index the table keeps, which
# serves every lookup they did: each was one more index to write at every insert and at every
# update that cannot stay on its page (claims, submits, imports, rescoring's scores;
# tests/config/test_schema.py). Dropped by name, as they were made: the fields' AlterField would also
# drop and re-add (and so re-check over every row) each foreign key, and rebuild each table on
# SQLite.
COVERED = {
    "annotate_annotation_annotator_id_3732e61d": ("annotate_annotation", "annotator_id"),
    "annotate_annotation_solution_id_7ecedba6": ("annotate_annotation", "solution_id"),
    "annotate_autosteplabel_run_id_454c154b": ("annotate_autosteplabel", "run_id"),
    "annotate_completion_step_label_id_a703b1c0": ("annotate_completion", "step_label_id"),
    "annotate_queueitem_solution_id_fb3247f6": ("annotate_queueitem", "solution_id"),
    "annotate_queueitem_status_990ceefc": ("annotate_queueitem", "status"),
    "annotate_solution_problem_id_68d688a1": ("annotate_solution", "problem_id"),
    "annotate_step_solution_id_b1d8c544": ("annotate_step", "solution_id"),
    "annotate_steplabel_annotation_id_709b6f9f": ("annotate_steplabel", "annotation_id"),
}


class Migration(migrations.Migration):

    dependencies = [
        ('annotate', '0016_assistance'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(
                sql=[f'DROP INDEX IF EXISTS "{name}"' for name in COVERED],
                reverse_sql=[f'CREATE INDEX "{name}" ON "{table}" ("{column}")'
                             for name, (table, column) in COVERED.items()],
            )],
            state_operations=[
                migrations.AlterField(
                    model_name='annotation',
                    name='annotator',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='annotations', to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(
                    model_name='annotation',
                    name='solution',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='annotations', to='annotate.solution'),
                ),
                migrations.AlterField(
                    model_name='autosteplabel',
                    name='run',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='labels', to='annotate.autolabelrun'),
                ),
                migrations.AlterField(
                    model_name='completion',
                    name='step_label',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='completions', to='annotate.steplabel'),
                ),
                migrations.AlterField(
                    model_name='queueitem',
                    name='solution',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='queue_items', to='annotate.solution'),
                ),
                migrations.AlterField(
                    model_name='queueitem',
                    name='status',
                    field=models.CharField(choices=[('available', 'Available'), ('leased', 'Leased'), ('done', 'Done'), ('retired', 'Retired')], default='available', max_length=20),
                ),
                migrations.AlterField(
                    model_name='solution',
                    name='problem',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='solutions', to='annotate.problem'),
                ),
                migrations.AlterField(
                    model_name='step',
                    name='solution',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='steps', to='annotate.solution'),
                ),
                migrations.AlterField(
                    model_name='steplabel',
                    name='annotation',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='step_labels', to='annotate.annotation'),
                ),
            ],
        ),
    ]
