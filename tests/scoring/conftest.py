"""Fixtures of the model side's tests: a tiny causal LM and a real OpenAI-compatible server on it."""
import pytest
import torch

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


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test, as before it afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
