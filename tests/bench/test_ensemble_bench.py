"""The rebuild benchmark runs end to end and shows the stored ensemble at work (not timed)."""
import io

import pytest
from django.core.management import CommandError

import bench
from tests.factories import SolutionFactory


def rows_by_state(output: str) -> dict[str, list[str]]:
    states = {}
    for line in output.splitlines():
        head, _, rest = line.partition("  ")
        if head.strip() in {"cold", "warm", "no artifact", "new labels", "warm again"} and rest.split():
            states.setdefault(head.strip(), []).append(rest.split())
    return states


def test_bench_fits_once_reuses_the_stored_ensemble_and_refits_on_new_labels(db):
    out = io.StringIO()
    bench.call("bench_selection", solutions=40, labels=8, new_labels=3, no_score=True, stdout=out)
    states = rows_by_state(out.getvalue())
    # seconds, fits, uncertainties computed
    assert states["cold"][0][1:] != ["0", "0"] and states["cold"][0][1] == "1"
    assert all(row[1:] == ["0", "0"] for row in states["warm"] + states["warm again"])
    assert states["no artifact"][0][1] == "1" and states["new labels"][0][1] == "1"
    assert "gather_rows" in out.getvalue()


def test_bench_refuses_a_database_with_other_solutions(db):
    SolutionFactory()
    with pytest.raises(CommandError, match="scratch database"):
        bench.call("bench_selection", solutions=10, stdout=io.StringIO())
