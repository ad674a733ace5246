"""A file's lines are recorded per solution, so the same file imported into two projects counts
its samples in each."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('annotate', '0021_projects'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='sampleline',
            name='unique_sample_line',
        ),
        migrations.AddConstraint(
            model_name='sampleline',
            constraint=models.UniqueConstraint(fields=('file_digest', 'line_no', 'solution'), name='unique_sample_line_per_solution'),
        ),
    ]
