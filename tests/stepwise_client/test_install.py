"""`stepwise_client` installs and runs alone: from a fresh virtualenv holding nothing of the
server, it scores completions through a running Stepwise, and its modules import nothing but
the standard library and the package itself."""
import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scoring.core.prm import StepProbability, aggregate
from scoring.rescoring.rescore import score_texts
from steps.splitting import split_steps
from tests.conftest import REPO_ROOT
from tests.stepwise_client.conftest import tiny_version

PACKAGE = REPO_ROOT / "stepwise_client"
SERVER_PACKAGES = ("annotate", "scoring", "config", "infra", "bench", "tests", "django", "rest_framework")

PROMPTS = ["What is 2 + 3?", [{"role": "user", "content": "What is 7 * 6?"}], "What is 1 + 1?"]
COMPLETIONS = ["2 + 3 = 5.\n\nSo the sum is 5.\n\n# Answer\n\n5",
               [{"role": "assistant", "content": "7 * 6 = 42.\nThe answer is 42."}],
               "  \n"]  # no text: never sent

# What the installed package does, run by the venv's interpreter in isolated mode (-I: no
# PYTHONPATH, no current directory on sys.path), from a directory outside the repository.
SCRIPT = """
import json, sys
import stepwise_client
from stepwise_client import make_prm_reward, make_prm_step_rewards, score_answers, step_texts

prompts, completions, server_packages = json.loads(sys.argv[1])
answers = score_answers(prompts, completions)
print(json.dumps({
    "file": stepwise_client.__file__,
    "min": make_prm_reward(aggregation="min")(prompts, completions),
    "product": make_prm_reward(aggregation="product")(prompts, completions),
    "dense": make_prm_step_rewards()(prompts, completions),
    "steps": [step_texts(answer) if answer else None for answer in answers],
    "server_modules": sorted({name.split(".")[0] for name in sys.modules} & set(server_packages)),
}))
"""


def run(command: list, **kwargs) -> subprocess.CompletedProcess:
    """A command that must succeed; its output is the failure's message when it does not."""
    done = subprocess.run([str(part) for part in command], capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, command))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def without_pythonpath() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory) -> Path:
    """A fresh virtualenv with only stepwise_client installed, offline, from a copy of this tree.

    The wheel is built with the test environment's setuptools: the setuptools a Python 3.11 venv
    bundles (65.5) cannot build a wheel without the `wheel` package, which an offline venv lacks.
    It is built from a copy so that setuptools' build/ and egg-info never land in the repository.
    """
    root = tmp_path_factory.mktemp("install")
    shutil.copytree(PACKAGE, root / "src" / "stepwise_client",
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    env = without_pythonpath()
    run([sys.executable, "-m", "pip", "wheel", "--no-index", "--no-build-isolation", "--no-deps",
         "--wheel-dir", root / "dist", "./stepwise_client"], cwd=root / "src", env=env)
    run([sys.executable, "-m", "venv", root / "venv"], env=env)
    python = root / "venv" / "bin" / "python"
    run([python, "-m", "pip", "install", "--no-index", *sorted((root / "dist").glob("*.whl"))], env=env)
    return python


def imported_modules(path: Path) -> list[str]:
    """Every module `path` imports by name (relative imports stay inside the package)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def dynamic_imports(path: Path) -> list[str]:
    calls = [node.func for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)]
    return [ast.unparse(func) for func in calls
            if (isinstance(func, ast.Name) and func.id == "__import__")
            or (isinstance(func, ast.Attribute) and func.attr == "import_module")]


def test_no_module_of_the_client_imports_anything_but_the_standard_library_and_itself():
    modules = sorted(PACKAGE.glob("*.py"))
    assert {path.name for path in modules} >= {"__init__.py", "client.py", "rewards.py", "retrying.py"}
    for path in modules:
        for name in imported_modules(path):
            top = name.split(".")[0]
            assert top not in SERVER_PACKAGES, f"stepwise_client/{path.name} imports the server's {name}"
            assert top == "stepwise_client" or top in sys.stdlib_module_names, (
                f"stepwise_client/{path.name} imports {name}, which is not in the standard library")
        assert dynamic_imports(path) == [], f"stepwise_client/{path.name} imports by name at run time"


@pytest.mark.django_db(transaction=True)
def test_installed_alone_it_scores_completions_as_the_server_scores_their_steps(
        venv_python, web, worker, token, tiny_folder, tmp_path):
    version = tiny_version(tiny_folder)
    env = {**without_pythonpath(), "STEPWISE_URL": web.url, "STEPWISE_TOKEN": token}
    argument = json.dumps([PROMPTS, COMPLETIONS, SERVER_PACKAGES])
    answer = json.loads(run([venv_python, "-I", "-c", SCRIPT, argument], cwd=tmp_path, env=env).stdout)

    # Imported from the venv's site-packages, not from the repository, and nothing of the server came along.
    assert Path(answer["file"]).resolve().is_relative_to(venv_python.parent.parent.resolve())
    assert "site-packages" in Path(answer["file"]).parts
    assert answer["server_modules"] == []

    # The server cut each completion with its splitter and scored those steps with the model.
    steps = [split_steps(COMPLETIONS[0]), split_steps(COMPLETIONS[1][0]["content"])]
    assert answer["steps"] == [*steps, None]
    scored = score_texts(items=[("What is 2 + 3?", steps[0]), ("What is 7 * 6?", steps[1])], model_version=version)
    expected = [[step["p"] for step in solution] for solution in scored]
    assert [len(dense) for dense in answer["dense"]] == [len(steps[0]), len(steps[1]), 0]
    for got, want in zip(answer["dense"][:2], expected, strict=True):
        assert got == pytest.approx(want, abs=1e-6)
    for how in ("min", "product"):
        want = [aggregate([StepProbability(p=p) for p in solution])[how] for solution in expected]
        assert answer[how] == pytest.approx([*want, 0.0], abs=1e-6)


def test_the_clients_aggregations_are_the_servers():
    # The client stands alone, so it names the aggregations itself; the server's step core owns them.
    from steps import arithmetic
    from stepwise_client.rewards import AGGREGATIONS

    assert set(AGGREGATIONS) == set(arithmetic.AGGREGATIONS)
