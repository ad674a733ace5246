import django.db.models.deletion
from django.db import migrations, models

# Indexes whose column is the first of the table's unique constraint, which serves every lookup
# they did (annotate's 0017 says more): dropped by name, as they were made, leaving the foreign
# keys as they are.
COVERED = {
    "scoring_generationchunk_run_id_147197a1": ("scoring_generationchunk", "run_id"),
    "scoring_rescorechunk_job_id_d1db1f36": ("scoring_rescorechunk", "job_id"),
    "scoring_solutionscore_solution_id_2b151d5a": ("scoring_solutionscore", "solution_id"),
    "scoring_stepscore_step_id_c36076a8": ("scoring_stepscore", "step_id"),
}


class Migration(migrations.Migration):

    dependencies = [
        ('annotate', '0017_covered_indexes'),
        ('scoring', '0010_hand_down_model_p'),
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
                    model_name='generationchunk',
                    name='run',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='chunks', to='scoring.generationrun'),
                ),
                migrations.AlterField(
                    model_name='rescorechunk',
                    name='job',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='chunks', to='scoring.rescorejob'),
                ),
                migrations.AlterField(
                    model_name='solutionscore',
                    name='solution',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='scores', to='annotate.solution'),
                ),
                migrations.AlterField(
                    model_name='stepscore',
                    name='step',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='scores', to='annotate.step'),
                ),
            ],
        ),
    ]
