"""The real public data the repository carries (tests/data/README.md): GSM8K, MATH-500 and real
Qwen2.5-Math responses. Every benchmark's default data comes from here, inside the repository."""
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
