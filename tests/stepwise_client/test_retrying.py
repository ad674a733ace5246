"""One retry policy for Stepwise's three HTTP clients: the RL reward client, the remote /pooling
scorer and the OpenAI-compatible generator retry the same answers, wait what Retry-After says in
either of its forms, and count their attempts alike. Each is driven against a real HTTP server
that fails as scripted, then answers in the client's protocol."""
import email.utils
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import openai
import pytest

from scoring.generation.generators import SamplingParams
from scoring.generation.openai_generator import OpenAIGenerator
from scoring.store.remote_scorer import RemoteConfig, RemotePRM, RemoteScoringError
from stepwise_client import StepwiseClient, StepwiseError
from stepwise_client.retrying import MAX_DELAY, RetryPolicy, retry_after_seconds
from tests.stepwise_client.scripted_server import ScriptedServer


# Each consumer, called with no backoff of its own: a wait can only come from Retry-After.
def reward_client(url: str, retries: int):
    return StepwiseClient(url, "token", retries=retries, backoff=0).score([("What is 2 + 3?", ["2 + 3 = 5."])])


def remote_scorer(url: str, retries: int):
    config = RemoteConfig(url=url, served_model="m", separator="\n\n", retries=retries, backoff=0)
    return RemotePRM(config).step_probabilities([("What is 2 + 3?", ["2 + 3 = 5."])])


def openai_generator(url: str, retries: int):
    generator = OpenAIGenerator(f"{url}/v1", "m", max_retries=retries, backoff_seconds=0, concurrency=1)
    return generator.generate(["What is 2 + 3?"], SamplingParams(max_tokens=2))


CONSUMERS = [reward_client, remote_scorer, openai_generator]
REFUSED = {reward_client: StepwiseError, remote_scorer: RemoteScoringError, openai_generator: openai.APIStatusError}


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
def test_every_client_retries_a_busy_or_failing_server(consumer, status):
    with ScriptedServer([(status, {})]) as server:
        assert consumer(server.url, retries=1)
    assert server.requests == 2


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_no_client_retries_a_request_the_server_refused(consumer, status):
    with ScriptedServer([(status, {})] * 3) as server, pytest.raises(REFUSED[consumer]) as refused:
        consumer(server.url, retries=2)
    assert server.requests == 1
    assert str(status) in str(refused.value) or getattr(refused.value, "status_code", None) == status


def http_date(seconds_ahead: float) -> str:
    return email.utils.formatdate(time.time() + seconds_ahead, usegmt=True)


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize("retry_after", ["delta-seconds", "http-date"])
def test_every_client_waits_what_retry_after_names_in_either_form(consumer, retry_after):
    # An HTTP date has whole seconds: 2.5 s ahead is at least 1.5 s away when it is read.
    value = "1.5" if retry_after == "delta-seconds" else http_date(2.5)
    with ScriptedServer([(429, {"Retry-After": value})]) as server:
        started = time.monotonic()
        consumer(server.url, retries=1)
        waited = time.monotonic() - started
    assert server.requests == 2 and 1.4 <= waited < 4


def test_the_last_failure_is_reported_with_the_attempts_it_took():
    with ScriptedServer([(503, {})] * 3) as server, pytest.raises(StepwiseError, match="answered 503"):
        reward_client(server.url, retries=2)
    assert server.requests == 3
    with ScriptedServer([(503, {})] * 3) as server, pytest.raises(RemoteScoringError, match=r"after 3 attempts"):
        remote_scorer(server.url, retries=2)
    assert server.requests == 3
    generator = OpenAIGenerator("http://127.0.0.1:9/v1", "m", max_retries=2, backoff_seconds=0, concurrency=1)
    with pytest.raises(openai.APIConnectionError):
        generator.generate(["What is 2 + 3?"], SamplingParams(max_tokens=2))
    assert generator.usage.retries == 2  # every retry is counted, the first attempt is not a retry
    with pytest.raises(StepwiseError, match="failed after 3 attempts"):
        StepwiseClient("http://127.0.0.1:9", "t", retries=2, backoff=0).score([("p", ["s"])])


def test_retry_after_reads_seconds_and_http_dates_and_nothing_else():
    now = datetime(2026, 12, 1, 20, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("120", now=now) == 120.0
    assert retry_after_seconds(" 0 ", now=now) == 0.0
    assert retry_after_seconds("Tue, 01 Dec 2026 20:00:30 GMT", now=now) == 30.0  # RFC 9110's IMF-fixdate
    assert retry_after_seconds("Tuesday, 01-Dec-26 20:00:30 GMT", now=now) == 30.0  # the obsolete RFC 850 form
    assert retry_after_seconds("Tue Dec  1 20:00:30 2026", now=now) == 30.0  # asctime
    assert retry_after_seconds("Tue, 01 Dec 2026 19:00:00 GMT", now=now) == 0.0  # already past: retry now
    assert retry_after_seconds("-5", now=now) == 0.0
    for unreadable in (None, "", "soon", "nan", "Tue, 99 Foo 2026"):
        assert retry_after_seconds(unreadable, now=now) is None  # the backoff decides
    assert retry_after_seconds(email.utils.format_datetime(now + timedelta(seconds=9), usegmt=True), now=now) == 9.0


def test_backoff_is_full_jitter_doubling_up_to_the_cap_and_retry_after_is_capped_too():
    policy = RetryPolicy(retries=8, backoff=0.5)
    for retry, bound in [(0, 0.5), (1, 1.0), (3, 4.0), (7, MAX_DELAY)]:
        delays = [policy.delay(retry) for _ in range(400)]
        assert all(0 <= delay <= bound for delay in delays)
        assert max(delays) - min(delays) > bound / 2  # spread out, not one fixed wait
    assert policy.delay(0, retry_after=3.0) == 3.0
    assert policy.delay(0, retry_after=3600.0) == MAX_DELAY


def test_the_client_package_imports_neither_django_nor_torch_nor_the_server():
    """RL trainers put stepwise_client on their path alone; scoring imports its retry policy, not the reverse."""
    probe = ("import sys, stepwise_client, stepwise_client.retrying; "
             "print(sorted({m.split('.')[0] for m in sys.modules}"
             " & {'django', 'torch', 'rest_framework', 'annotate', 'scoring', 'config', 'infra'}))")
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert imported.strip() == "[]"
