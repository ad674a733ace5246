"""The OpenAI-compatible backend of `scoring.generation.generators`: vLLM, SGLang, llama.cpp, TGI, or OpenAI.

Through the official `openai` client, one request per prompt (`n` samples each), at most
`concurrency` requests in flight (a thread pool over the prompts). The client's own retries
are off (`max_retries=0`): this module retries by Stepwise's one policy
(`stepwise_client.retrying`: 408/409/429/5xx answers, timeouts and lost connections; the
server's Retry-After, else exponential backoff with full jitter) so that every retry is
counted in `usage.retries` and a run can say what the server cost it. HTTP goes through
`infra.outbound_http`, Stepwise's one outbound client. No Django (but for the setting
`infra.outbound` reads).

    generator = OpenAIGenerator("http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-Math-7B-Instruct")
    samples = generator.generate(prompts, SamplingParams(n=4, max_tokens=512, seed=1))
"""
from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai

from infra import outbound_http
from scoring.generation.generators import Sample, SamplingParams, TokenLogprob, Usage
from stepwise_client.retrying import RetryPolicy, is_retryable_status, retry_after_seconds

MODES = ("completions", "chat")
# The largest answer read: 64 samples of 4,096 tokens are about 2 MB of JSON; a server that sends
# more is broken or hostile, and the worker's memory is not its to fill.
MAX_ANSWER_BYTES = 32 * 1024 * 1024


class OpenAIGenerator:
    """The Generator protocol over an OpenAI-compatible HTTP server."""

    def __init__(self, base_url: str, model: str, *, api_key_env: str = "OPENAI_API_KEY", mode: str = "completions",
                 concurrency: int = 8, max_retries: int = 5, timeout: float = 60.0, name: str | None = None,
                 backoff_seconds: float = 0.5):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        # Local servers take any key; the client insists on one being set.
        api_key = os.environ.get(api_key_env) or "unused"
        # Stepwise's one outbound client: the URL checked at each call, no redirect followed (a 3xx
        # is an APIStatusError naming its status, not retried), each answer whole within `timeout`
        # and no larger than MAX_ANSWER_BYTES.
        http_client = outbound_http.client(seconds=timeout, max_bytes=MAX_ANSWER_BYTES)
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout,
                                    http_client=http_client)
        self.model, self.mode, self.concurrency = model, mode, concurrency
        self.timeout = timeout
        self.retry = RetryPolicy(retries=max_retries, backoff=backoff_seconds)
        self.name = name or f"openai:{model}"
        self.usage = Usage()
        self._usage_lock = threading.Lock()

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Sample]]:
        """`params.n` samples for each prompt, in prompt order; raises after `max_retries` failed tries."""
        if len(prompts) <= 1 or self.concurrency == 1:
            return [self._generate_one(prompt, params) for prompt in prompts]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            return list(pool.map(lambda prompt: self._generate_one(prompt, params), prompts))

    def _generate_one(self, prompt: str, params: SamplingParams) -> list[Sample]:
        response = self._with_retries(lambda: self._request(prompt, params))
        samples = samples_from_response(response, mode=self.mode, max_tokens=params.max_tokens)
        with self._usage_lock:
            self.usage.add(samples)
        return samples

    def _request(self, prompt: str, params: SamplingParams):
        fields: dict[str, Any] = {
            "model": self.model, "n": params.n, "temperature": params.temperature, "top_p": params.top_p,
            "max_tokens": params.max_tokens, "stop": list(params.stop) or None, "seed": params.seed,
            "timeout": self.timeout,
        }
        fields = {key: value for key, value in fields.items() if value is not None}
        if self.mode == "chat":
            if params.logprobs:
                fields.update(logprobs=True, top_logprobs=params.logprobs)
            return self.client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **fields)
        if params.logprobs:
            fields["logprobs"] = params.logprobs
        return self.client.completions.create(prompt=prompt, **fields)

    def _with_retries(self, call):
        try:
            return self.retry.call(call, retryable=is_retryable, retry_after=retry_after, on_retry=self._count_retry)
        except openai.APIStatusError as error:
            if not 300 <= error.status_code < 400:
                raise
            raise openai.APIStatusError(f"HTTP {error.status_code}: {outbound_http.not_followed(error.response)} "
                                        "(use the URL it names)", response=error.response, body=error.body) from None

    def _count_retry(self, error: Exception) -> None:
        with self._usage_lock:
            self.usage.retries += 1


def is_retryable(error: Exception) -> bool:
    """Timeouts, lost connections (APITimeoutError is one) and the statuses the policy retries;
    not an answer the outbound client refused (too large: the same server would send the same)."""
    if isinstance(error, openai.APIConnectionError):
        return not isinstance(error.__cause__, outbound_http.AnswerRefused)
    return isinstance(error, openai.APIStatusError) and is_retryable_status(error.status_code)


def retry_after(error: Exception) -> float | None:
    if isinstance(error, openai.APIStatusError):
        return retry_after_seconds(error.response.headers.get("retry-after"))
    return None


def samples_from_response(response, *, mode: str, max_tokens: int | None = None) -> list[Sample]:
    """Samples in choice order, with the response's token usage.

    The protocol reports completion tokens for the whole request, not per choice; with n > 1
    they are shared out by text length so that the samples sum to exactly what was reported.
    """
    choices = sorted(response.choices, key=lambda choice: choice.index)
    texts = [(choice.message.content or "") if mode == "chat" else choice.text for choice in choices]
    usage = response.usage
    prompt_tokens = usage.prompt_tokens if usage else 0
    completion = split_tokens(usage.completion_tokens if usage else 0, [len(t) for t in texts], cap=max_tokens)
    return [
        Sample(text=text, prompt_tokens=prompt_tokens, completion_tokens=tokens,
               finish_reason=choice.finish_reason or "stop", logprobs=token_logprobs(choice, mode=mode))
        for choice, text, tokens in zip(choices, texts, completion)
    ]


def token_logprobs(choice, *, mode: str) -> tuple[TokenLogprob, ...] | None:
    """The choice's per-token logprobs in either protocol's shape, or None where the server gave none.

    Chat: `logprobs.content[i] = {token, logprob, top_logprobs: [{token, logprob}]}`; completions:
    parallel lists `tokens`, `token_logprobs`, `top_logprobs` (one {token: logprob} per position).
    """
    logprobs = getattr(choice, "logprobs", None)
    if not logprobs:
        return None
    if mode == "chat":
        return tuple(TokenLogprob(entry.token, float(entry.logprob),
                                  tuple((alt.token, float(alt.logprob)) for alt in entry.top_logprobs or ()))
                     for entry in logprobs.content or ())
    tops = logprobs.top_logprobs or [None] * len(logprobs.tokens or ())
    return tuple(TokenLogprob(token, float(logprob if logprob is not None else 0.0),
                              tuple((alt, float(value)) for alt, value in (top or {}).items()))
                 for token, logprob, top in zip(logprobs.tokens or (), logprobs.token_logprobs or (), tops))


def split_tokens(total: int, weights: Sequence[int], *, cap: int | None = None) -> list[int]:
    """`total` in integer parts roughly proportional to `weights`, none over `cap` where the
    total allows, summing to exactly `total`."""
    if not weights:
        return []
    weights = [w + 1 for w in weights]  # an empty text still cost its end-of-text token
    parts = [total * w // sum(weights) for w in weights]
    if cap is not None and total <= cap * len(parts):
        parts = [min(part, cap) for part in parts]
    i = 0
    while sum(parts) < total:  # the remainder, one token at a time, to parts under the cap
        if cap is None or parts[i % len(parts)] < cap or total > cap * len(parts):
            parts[i % len(parts)] += 1
        i += 1
    return parts
