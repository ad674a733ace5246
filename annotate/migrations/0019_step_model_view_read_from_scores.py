from django.db import migrations

# An assisted page reads the current model's view where scoring stores its scores
# (annotate.labeling.assistance), so the copy scoring wrote onto each step is gone: a version
# made current is shown at once, without rewriting every step of the pool.


class Migration(migrations.Migration):

    dependencies = [
        ('annotate', '0018_unused_like_indexes'),
        # The last migration that writes the column.
        ('scoring', '0010_hand_down_model_p'),
    ]

    operations = [
        migrations.RemoveField(
            model_name='step',
            name='model_p',
        ),
    ]
