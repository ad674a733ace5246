"""The import and export benchmarks work in the project they are given, beside others."""
import io

import pytest

import bench
from annotate.models import Annotation, Project, Solution
from bench.commands import bench_export
from tests.scoring.projects import solution_in, two_projects

pytestmark = pytest.mark.django_db


def test_the_export_benchmark_makes_and_exports_its_rows_in_the_named_project():
    gsm8k, math = two_projects()
    solution_in(gsm8k)
    command = bench_export.Command(stdout=io.StringIO())
    command.project = math  # what --project math sets, in this process (its children read their own database)
    command.ensure_data(12, 2)
    assert Annotation.objects.filter(project=math).count() == 12 and not Annotation.objects.exclude(project=math)
    assert command.export_once("prm800k")["lines"] == 12
    command.project = gsm8k
    assert command.export_once("prm800k")["lines"] == 0  # another project's rows are not its


def test_the_import_benchmark_imports_into_the_named_project_and_rolls_back():
    gsm8k, _ = two_projects()
    out = io.StringIO()
    bench.call("bench_import", solutions=10, project="gsm8k", stdout=out)
    report = out.getvalue()
    assert "project gsm8k" in report and "large.jsonl: 10 lines" in report and "rolled back" in report, report
    assert not Solution.objects.filter(project=gsm8k).exists()
    assert Project.objects.count() == 3
