"""A clone alone passes its tests (tests/outside_reads.py), seen from pytest runs of their own."""
import pytest

from tests.conftest import TEST_DATA
from tests.test_ci import child_tests, run_pytest

READS_BESIDE = """
from pathlib import Path

def test_reads_a_folder_beside_the_checkout():
    try:
        open(Path({repo!r}).parent / "shared" / "data" / "gsm8k" / "test.jsonl").close()
    except OSError:
        pass  # the read was tried: on a fresh clone it is a FileNotFoundError
"""

READS_INSIDE = """
def test_reads_the_repository_data():
    with open({path!r}) as handle:
        assert handle.readline()
"""


@pytest.mark.slow
def test_a_test_that_opens_a_file_beside_the_repository_fails_naming_it(tmp_path):
    from tests.conftest import REPO_ROOT

    code, output = run_pytest(tmp_path, child_tests(tmp_path, READS_BESIDE.format(repo=str(REPO_ROOT))))
    assert code == 1, output
    assert "read outside the repository: " + str(REPO_ROOT.parent / "shared" / "data" / "gsm8k") in output


@pytest.mark.slow
def test_a_test_that_reads_the_repository_data_passes(tmp_path):
    path = TEST_DATA / "gsm8k" / "test.jsonl"
    code, output = run_pytest(tmp_path, child_tests(tmp_path, READS_INSIDE.format(path=str(path))))
    assert code == 0, output


def test_every_data_folder_the_tests_read_carries_its_origin_and_licence():
    readme = (TEST_DATA / "README.md").read_text()
    for folder in sorted(p.name for p in TEST_DATA.iterdir() if p.is_dir()):
        assert f"`{folder}/`" in readme, folder
    assert (TEST_DATA / "gsm8k" / "LICENSE").read_text().startswith("MIT License")
