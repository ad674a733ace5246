"""The review page shows automatic step labels beside human ones, marked as automatic."""
import re

from django.urls import reverse

from annotate.models import AutoLabelRun, AutoStepLabel
from tests.annotations import annotate
from tests.factories import SolutionFactory


def test_the_reviewer_sees_each_steps_automatic_labels_apart_from_the_human_ratings(client, reviewer):
    solution = SolutionFactory(steps=["Add 2 and 2.", "So it is 5.", "# Answer\n\n5"], is_correct=False)
    annotation = annotate(solution, [1, -1])
    sweep = AutoLabelRun.objects.create(method=AutoLabelRun.Method.MATH_SHEPHERD, source="local:smollm2")
    search = AutoLabelRun.objects.create(method=AutoLabelRun.Method.OMEGAPRM, source="local:smollm2")
    steps = list(solution.steps.order_by("index"))
    for step, k in zip(steps, (3, 0, 0)):
        AutoStepLabel.objects.create(run=sweep, step=step, n_rollouts=4, n_correct=k, soft=k / 4)
    AutoStepLabel.objects.create(run=search, step=steps[0], soft=1.0)  # inferred: no counts
    client.force_login(reviewer)
    page = client.get(reverse("annotate:review-detail", args=[annotation.pk])).content.decode()
    rows = re.findall(r"<tr>.*?</tr>", page, flags=re.S)[1:]
    assert "3/4 · math_shepherd" in rows[0] and "good (inferred) · omegaprm" in rows[0]
    assert "0/4 · math_shepherd" in rows[1] and "omegaprm" not in rows[1]
    assert all("auto-tag" in row and "Automatic label (not human)" in row for row in rows)
    # The human ratings are the annotator's, whatever the automatic labels say.
    assert 'class="r1"' in rows[0] and 'class="r-1"' in rows[1]
