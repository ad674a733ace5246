"""The step core, steps: plain functions that anything reading a solution's text may call."""
import pkgutil
import subprocess
import sys

import steps
from tests.conftest import REPO_ROOT

FORBIDDEN = ("django", "scoring", "config", "infra", "torch", "numpy")


def test_the_step_core_imports_no_django_no_other_app_and_no_torch():
    modules = [f"steps.{m.name}" for m in pkgutil.iter_modules(steps.__path__)]
    assert {"steps.scanning", "steps.splitting", "steps.arithmetic"} <= set(modules)
    script = (f"import sys\nfor name in {modules!r}: __import__(name)\n"
              "print('\\n'.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    assert [m for m in loaded if m.split(".")[0] in FORBIDDEN] == []
    assert [m for m in loaded if m.startswith("annotate.") and not m.startswith("steps")] == []
