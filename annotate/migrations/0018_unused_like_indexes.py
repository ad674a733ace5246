from django.db import migrations

# PostgreSQL's second index beside each indexed or unique text column, with the pattern operator
# class that only a LIKE 'prefix%' lookup uses; no Stepwise query makes one, so each was only
# one more index to write at every insert (imports, claims) and at every update off its page
# (tests/config/test_schema.py). Unused, they are not made again going back. SQLite never had them.
UNUSED = [
    "annotate_annotation_labeler_0d1d1c7d_like",
    "annotate_annotation_status_f9c5064d_like",
    "annotate_exportjob_state_a00ae100_like",
    "annotate_importjob_state_0854724c_like",
    "annotate_problem_content_hash_3221766b_like",
    "annotate_problem_source_a8b24984_like",
    "annotate_problem_split_aba09b00_like",
    "annotate_queueitem_status_990ceefc_like",
    "annotate_solution_content_hash_58775112_like",
    "annotate_solution_generator_35d840ce_like",
    "annotate_solution_source_744303e3_like",
]


class Migration(migrations.Migration):

    dependencies = [
        ('annotate', '0017_covered_indexes'),
    ]

    operations = [
        migrations.RunSQL(sql=[f'DROP INDEX IF EXISTS "{name}"' for name in UNUSED], reverse_sql=migrations.RunSQL.noop),
    ]
