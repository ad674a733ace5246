"""The workspace benchmark command runs end to end and reports no duplicate leases (not timed)."""
import io

import pytest
from django.core.management import CommandError

import bench
from annotate.models import Annotation, LabelingConfig, Project
from tests.factories import SolutionFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]


def test_bench_prints_latencies_for_each_client_count_and_zero_duplicates():
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"qc_rate": 0.3})
    out = io.StringIO()
    bench.call("bench_workspace", solutions=40, tasks=4, clients="1,2", stdout=out)
    lines = out.getvalue().splitlines()
    rows = [line.split() for line in lines if line.strip() and line.split()[0] in {"1", "2"}]
    assert [row[0] for row in rows] == ["1", "2"]
    assert [row[1] for row in rows] == ["4", "4"]  # Tasks labeled per run.
    assert [row[7] for row in rows] == ["0", "0"]  # Duplicate leases.
    assert Annotation.objects.filter(status="submitted").count() == 8
    assert LabelingConfig.of(Project.objects.sole()).qc_rate == 0.3  # The project's settings are restored.


def test_bench_refuses_a_database_with_real_solutions():
    SolutionFactory()
    with pytest.raises(CommandError, match="scratch database"):
        bench.call("bench_workspace", solutions=10, tasks=2, clients="1", stdout=io.StringIO())
