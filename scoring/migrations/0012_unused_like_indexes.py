from django.db import migrations

# PostgreSQL's LIKE-only indexes beside indexed text columns, which no Stepwise query uses: see
# annotate's 0018. Not made again going back; SQLite never had them.
UNUSED = [
    "scoring_generationchunk_state_0a9eed14_like",
    "scoring_generationrun_state_87f985bf_like",
    "scoring_modelversion_name_ee7a26ca_like",
    "scoring_rescorechunk_state_0b865b3c_like",
    "scoring_rescorejob_state_74e185e3_like",
    "scoring_rolloutlabeljob_state_63ffd38a_like",
    "scoring_trainingrun_state_9a55bb38_like",
]


class Migration(migrations.Migration):

    dependencies = [
        ('scoring', '0011_covered_indexes'),
    ]

    operations = [
        migrations.RunSQL(sql=[f'DROP INDEX IF EXISTS "{name}"' for name in UNUSED], reverse_sql=migrations.RunSQL.noop),
    ]
