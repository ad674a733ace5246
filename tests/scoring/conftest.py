"""Fixtures of the model side's tests: a tiny causal LM and a real OpenAI-compatible server on it."""
import pytest

from bench.openai_server import ServerProcess
from bench.tiny import build_tiny_backbone


@pytest.fixture(scope="session")
def tiny_causal_lm(tmp_path_factory):
    """A seeded tiny Llama folder (safetensors): a policy model that writes in milliseconds."""
    return build_tiny_backbone(tmp_path_factory.mktemp("tiny-causal-lm") / "tiny-lm")


@pytest.fixture(scope="session")
def openai_server(tiny_causal_lm):
    """`python -m bench.openai_server` on the tiny model, without injected faults."""
    with ServerProcess(tiny_causal_lm, threads=1) as server:
        yield server
