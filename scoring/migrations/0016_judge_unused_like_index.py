from django.db import migrations

# PostgreSQL's LIKE-only index beside the judge job's state column, which no query uses (see 0012).
# A migration of its own: the index is made at the end of the migration that creates the table.


class Migration(migrations.Migration):

    dependencies = [
        ('scoring', '0015_judge_label_job'),
    ]

    operations = [
        migrations.RunSQL(sql='DROP INDEX IF EXISTS "scoring_judgelabeljob_state_0781c3eb_like"',
                          reverse_sql=migrations.RunSQL.noop),
    ]
