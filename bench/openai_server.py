"""An OpenAI-compatible server of our own, backed by a local causal LM (`LocalGenerator`).

The fallback for tests and laptops: Stepwise talks to vLLM, SGLang, llama.cpp or TGI through
the same protocol, and this serves that protocol where none is installed. Routes:
`POST /v1/completions`, `POST /v1/chat/completions` (the tokenizer's chat template when it
has one), `GET /v1/models`, in OpenAI's response shapes (`choices`, `finish_reason`, `usage`).

    python -m bench.openai_server --model FOLDER --port 8001 [--fail-every 2] [--fail-first 1] [--answers FILE]

prints its URL once it answers. Fault injection, for the tests of a client's retries:
`--fail-every K` answers every K-th generation request 503, `--fail-first K` answers the first
K with 429, `--stall-every K --stall-seconds S` holds every K-th for S seconds first (a timeout).
One generation runs at a time (one model, one device); requests wait their turn.

Scripted answers, for the tests of a client's reading of what a model says (a judge's answer
malformed, cut short, too long, slow, in another language): `--answers FILE`, a JSON list of
`{"text": ..., "finish_reason": "stop"|"length", "delay": SECONDS, "logprobs": [[token, logprob,
{alternative: logprob, ...}], ...]}` (all but text optional), served in turn to the generation
requests instead of the model's own, from the first again after the last. Logprobs (the model's
own, or a scripted answer's) are sent only to a request that asks for them (`logprobs`), in its
protocol's shape.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.serving import HTTPError, JSONServer
from scoring.generation.generators import LocalGenerator, Sample, SamplingParams, TokenLogprob

READY_LINE = "Serving {name} (OpenAI-compatible) at {url}"
READY = re.compile(r"Serving (\S+) \(OpenAI-compatible\) at (\S+)")


@dataclass(frozen=True)
class Faults:
    fail_every: int = 0
    fail_first: int = 0
    stall_every: int = 0
    stall_seconds: float = 0.0


@dataclass(frozen=True)
class ScriptedAnswer:
    """An answer served instead of the model's (`--answers`)."""

    text: str
    finish_reason: str = "stop"
    delay: float = 0.0  # seconds to wait before answering (past a client's timeout: a slow server)
    logprobs: tuple[TokenLogprob, ...] | None = None


def load_answers(path: str | Path) -> list[ScriptedAnswer]:
    """The scripted answers of a JSON file (see the module's docstring); a ValueError names a bad entry."""
    entries = json.loads(Path(path).read_text())
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: expected a non-empty JSON list of answers")
    answers = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
            raise ValueError(f"{path}: answer {i} must be an object with a string text")
        logprobs = entry.get("logprobs")
        answers.append(ScriptedAnswer(
            text=entry["text"], finish_reason=entry.get("finish_reason", "stop"), delay=float(entry.get("delay", 0)),
            logprobs=None if logprobs is None else tuple(
                TokenLogprob(token, float(logprob), tuple((alt, float(lp)) for alt, lp in (top or {}).items()))
                for token, logprob, top in logprobs)))
    return answers


class OpenAICompatibleApp:
    """The routes, over one generator (or scripted answers); counts generation requests for fault injection."""

    def __init__(self, generator: LocalGenerator, *, model_name: str, faults: Faults = Faults(),
                 answers: Sequence[ScriptedAnswer] = ()):
        self.generator, self.model_name, self.faults = generator, model_name, faults
        self._answers = itertools.cycle(answers) if answers else None
        self._counter = itertools.count(1)
        self._count_lock, self._generate_lock = threading.Lock(), threading.Lock()
        self.created = int(time.time())

    def routes(self) -> dict:
        return {("POST", "/v1/completions"): self.completions, ("POST", "/v1/chat/completions"): self.chat,
                ("GET", "/v1/models"): self.models}

    def models(self, body: dict) -> tuple[int, dict]:
        return 200, {"object": "list", "data": [
            {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "stepwise"}]}

    def completions(self, body: dict) -> tuple[int, dict]:
        self._admit(body)
        prompt = body.get("prompt")
        prompts = [prompt] if isinstance(prompt, str) else prompt
        if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
            raise ValueError("prompt must be a string or a non-empty list of strings")
        rows = self._generate(prompts, sampling_params(body, default_max_tokens=16))
        choices = [{"index": i, "text": s.text, "finish_reason": s.finish_reason,
                    "logprobs": completion_logprobs(s) if body.get("logprobs") else None}
                   for i, s in enumerate(sample for row in rows for sample in row)]
        return 200, self._envelope("text_completion", "cmpl", choices, rows)

    def chat(self, body: dict) -> tuple[int, dict]:
        self._admit(body)
        prompt = chat_prompt(self.generator.tokenizer, body.get("messages"))
        rows = self._generate([prompt], sampling_params(body, default_max_tokens=256))
        choices = [{"index": i, "message": {"role": "assistant", "content": s.text}, "finish_reason": s.finish_reason,
                    "logprobs": chat_logprobs(s) if body.get("logprobs") else None}
                   for i, s in enumerate(rows[0])]
        return 200, self._envelope("chat.completion", "chatcmpl", choices, rows)

    def _admit(self, body: dict) -> None:
        """The model check, then the injected faults, by the request's number."""
        if body.get("model") not in (None, self.model_name):
            raise HTTPError(404, f"the model {body.get('model')!r} does not exist; this server has {self.model_name!r}")
        with self._count_lock:
            number = next(self._counter)
        faults = self.faults
        if number <= faults.fail_first:
            raise HTTPError(429, f"rate limited (injected: first {faults.fail_first} requests)")
        if faults.fail_every and number % faults.fail_every == 0:
            raise HTTPError(503, f"unavailable (injected: every {faults.fail_every}th request)")
        if faults.stall_every and number % faults.stall_every == 0:
            time.sleep(faults.stall_seconds)

    def _generate(self, prompts: list[str], params: SamplingParams) -> list[list[Sample]]:
        if self._answers is not None:
            return [[self._scripted(prompt) for _ in range(params.n)] for prompt in prompts]
        with self._generate_lock:
            return self.generator.generate(prompts, params)

    def _scripted(self, prompt: str) -> Sample:
        assert self._answers is not None
        with self._count_lock:
            answer = next(self._answers)
        time.sleep(answer.delay)
        tokenizer = self.generator.tokenizer
        return Sample(text=answer.text, prompt_tokens=len(tokenizer(prompt)["input_ids"]),
                      completion_tokens=len(tokenizer(answer.text, add_special_tokens=False)["input_ids"]),
                      finish_reason=answer.finish_reason, logprobs=answer.logprobs)

    def _envelope(self, kind: str, prefix: str, choices: list[dict], rows: list[list[Sample]]) -> dict:
        prompt_tokens = sum(row[0].prompt_tokens for row in rows if row)  # each prompt read once
        completion_tokens = sum(s.completion_tokens for row in rows for s in row)
        return {
            "id": f"{prefix}-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()),
            "model": self.model_name, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }


def completion_logprobs(sample: Sample) -> dict | None:
    """A sample's logprobs in the completions protocol's shape (parallel lists), or None without them."""
    if sample.logprobs is None:
        return None
    return {"tokens": [t.token for t in sample.logprobs], "token_logprobs": [t.logprob for t in sample.logprobs],
            "top_logprobs": [dict(t.top) for t in sample.logprobs], "text_offset": []}


def chat_logprobs(sample: Sample) -> dict | None:
    """A sample's logprobs in the chat protocol's shape (`content`, one entry per token), or None."""
    if sample.logprobs is None:
        return None
    return {"content": [{"token": t.token, "logprob": t.logprob, "bytes": None,
                         "top_logprobs": [{"token": alt, "logprob": lp, "bytes": None} for alt, lp in t.top]}
                        for t in sample.logprobs]}


def sampling_params(body: dict, *, default_max_tokens: int) -> SamplingParams:
    """OpenAI's request fields, with OpenAI's defaults (temperature 1, top_p 1)."""
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else tuple(stop)
    return SamplingParams(
        temperature=float(body.get("temperature", 1.0)), top_p=float(body.get("top_p", 1.0)),
        max_tokens=int(body.get("max_tokens") or default_max_tokens), stop=stop, n=int(body.get("n", 1)),
        seed=None if body.get("seed") is None else int(body["seed"]), logprobs=requested_logprobs(body),
    )


def requested_logprobs(body: dict) -> int:
    """How many alternatives per token the request asks for: chat's `top_logprobs` (with `logprobs`
    true), or completions' `logprobs` count; 0 when none."""
    logprobs = body.get("logprobs")
    if logprobs is True:
        return int(body.get("top_logprobs") or 1)
    return int(logprobs) if isinstance(logprobs, int) and not isinstance(logprobs, bool) else 0


def chat_prompt(tokenizer, messages: Sequence[dict] | None) -> str:
    """The conversation as the model was trained to read it: its chat template, else the contents."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise ValueError(f"messages[{i}] must be an object with a string content")
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "\n\n".join(message["content"] for message in messages)


def make_server(generator: LocalGenerator, *, model_name: str, host: str = "127.0.0.1", port: int = 0,
                faults: Faults = Faults(), answers: Sequence[ScriptedAnswer] = ()) -> JSONServer:
    return JSONServer(OpenAICompatibleApp(generator, model_name=model_name, faults=faults, answers=answers).routes(),
                      host=host, port=port)


class ServerProcess:
    """`python -m bench.openai_server` as a child process (tests, `bench_generation`).

        with ServerProcess(folder, "--fail-every", "2") as server:
            OpenAIGenerator(server.base_url, server.model_name)
    """

    def __init__(self, model_folder: str | Path, *options: str, device: str = "cpu", threads: int | None = None):
        self.command = [sys.executable, "-m", "bench.openai_server", "--model", str(model_folder), "--port", "0",
                        "--device", device, *(["--threads", str(threads)] if threads else []), *options]
        self.process: subprocess.Popen | None = None
        self.base_url = self.model_name = ""
        self.output_tail: list[str] = []  # its last lines of output, for a failure message

    def start(self, timeout: float = 120.0) -> ServerProcess:
        """Start the process and wait for its ready line (its URL); RuntimeError with its output if it dies."""
        self.process = subprocess.Popen(
            self.command, cwd=Path(__file__).resolve().parent.parent, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        deadline, seen = time.monotonic() + timeout, []
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line and self.process.poll() is not None:
                break
            seen.append(line)
            ready = READY.search(line)
            if ready:
                self.model_name, self.base_url = ready.groups()
                # Keep reading its output (warnings, tracebacks): a full pipe would block the server.
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        self.stop()
        raise RuntimeError("the OpenAI-compatible server did not start:\n" + "".join(seen)[-3000:])

    def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.output_tail = (self.output_tail + [line])[-50:]

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a local causal LM folder (safetensors)")
    parser.add_argument("--served-model-name", help="the model id clients ask for (default: the folder's name)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001, help="0 picks a free port")
    parser.add_argument("--device", help="cpu, cuda, mps (default: the best there is)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's own choice)")
    parser.add_argument("--fail-every", type=int, default=0, metavar="K")
    parser.add_argument("--fail-first", type=int, default=0, metavar="K")
    parser.add_argument("--stall-every", type=int, default=0, metavar="K")
    parser.add_argument("--stall-seconds", type=float, default=0.0, metavar="S")
    parser.add_argument("--answers", metavar="FILE", help="a JSON list of scripted answers, served in turn")
    args = parser.parse_args(argv)
    answers = load_answers(args.answers) if args.answers else []
    if args.threads:
        import torch

        # On a shared, loaded CPU, a second OpenMP thread spin-waiting made requests 10x slower.
        torch.set_num_threads(args.threads)
    generator = LocalGenerator(args.model, device=args.device, batch_size=args.batch_size)
    name = args.served_model_name or generator.name.removeprefix("local:")
    faults = Faults(args.fail_every, args.fail_first, args.stall_every, args.stall_seconds)
    server = make_server(generator, model_name=name, host=args.host, port=args.port, faults=faults, answers=answers)
    print(READY_LINE.format(name=name, url=f"{server.url}/v1"), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
