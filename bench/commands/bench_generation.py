"""`./stepwise bench bench_generation`: generation through Stepwise's OpenAIGenerator against the
server's own throughput (raw HTTP at the same concurrency), on the same prompts.

    bench_generation                                  # our server on the default SmolLM2, on the CPU
    bench_generation --model FOLDER --prompts 32
    bench_generation --base-url http://127.0.0.1:8000/v1 --served-model M   # a vLLM / llama.cpp server

Greedy decoding (temperature 0) on both sides, so both ask the server for the same tokens;
the rounds alternate (raw, Stepwise, raw, ...) and the best of each is kept, so a
neighbour's load hurts neither side more. Prints completion tokens/s of both and the ratio.
"""
from __future__ import annotations

import json
import logging
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

from django.core.management.base import BaseCommand, CommandError

from bench.openai_server import ServerProcess
from scoring.generation.generators import (
    DEFAULT_PROMPT_TEMPLATE,
    SamplingParams,
    default_generator_folder,
    render_prompt,
)
from scoring.generation.openai_generator import OpenAIGenerator

PROBLEMS = ["What is {a} + {b}?", "What is {a} times {b}?", "Solve {a}x = {b} for x.",
            "What is the remainder when {a}{b} is divided by 7?"]


class Command(BaseCommand):
    help = "Tokens/s through Stepwise's OpenAI client against raw HTTP to the same server."

    def add_arguments(self, parser):
        parser.add_argument("--base-url", help="an OpenAI-compatible server (default: start ours on --model)")
        parser.add_argument("--served-model", help="with --base-url: the model id")
        parser.add_argument("--model", help="for our server: a local model folder (default: SmolLM2)")
        parser.add_argument("--prompts", type=int, default=16)
        parser.add_argument("--concurrency", type=int, default=8)
        parser.add_argument("--max-tokens", type=int, default=32)
        parser.add_argument("--rounds", type=int, default=2)
        parser.add_argument("--server-threads", type=int, help="our server's torch CPU threads")

    def handle(self, *args, **options):
        logging.getLogger("httpx2").setLevel(logging.WARNING)  # the openai client's one line per request
        if options["base_url"] and not options["served_model"]:
            raise CommandError("--base-url needs --served-model")
        prompts = bench_prompts(options["prompts"])
        server = None if options["base_url"] else ServerProcess(options["model"] or default_generator_folder(),
                                                         threads=options["server_threads"])
        with server or nullcontext():
            url = options["base_url"] or server.base_url
            model = options["served_model"] or server.model_name
            raw, ours = compare(url, model, prompts, concurrency=options["concurrency"],
                                max_tokens=options["max_tokens"], rounds=options["rounds"])
        self.stdout.write(
            f"{len(prompts)} prompts, concurrency {options['concurrency']}, max_tokens {options['max_tokens']}, "
            f"model {model}\n"
            f"  server (raw HTTP): {raw:.1f} completion tokens/s\n"
            f"  Stepwise (OpenAIGenerator): {ours:.1f} completion tokens/s\n"
            f"  ratio: {ours / raw:.3f}"
        )


def bench_prompts(count: int) -> list[str]:
    return [render_prompt(DEFAULT_PROMPT_TEMPLATE, PROBLEMS[i % len(PROBLEMS)].format(a=i + 3, b=2 * i + 5))
            for i in range(count)]


def compare(url: str, model: str, prompts: list[str], *, concurrency: int, max_tokens: int,
            rounds: int) -> tuple[float, float]:
    """Best tokens/s of raw HTTP and of OpenAIGenerator over `rounds` alternating rounds."""
    raw_http(url, model, prompts[:1], concurrency=1, max_tokens=2)  # warm-up: first-call costs on neither side
    raw, ours = [], []
    for _ in range(rounds):
        raw.append(raw_http(url, model, prompts, concurrency=concurrency, max_tokens=max_tokens))
        ours.append(through_stepwise(url, model, prompts, concurrency=concurrency, max_tokens=max_tokens))
    return max(raw), max(ours)


def raw_http(url: str, model: str, prompts: list[str], *, concurrency: int, max_tokens: int) -> float:
    """Completion tokens/s of plain POSTs to /completions, `concurrency` at a time."""
    def one(prompt: str) -> int:
        body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                           "seed": 0}).encode()
        request = urllib.request.Request(f"{url}/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as response:
            return json.loads(response.read())["usage"]["completion_tokens"]

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        tokens = sum(pool.map(one, prompts))
    return tokens / (time.perf_counter() - started)


def through_stepwise(url: str, model: str, prompts: list[str], *, concurrency: int, max_tokens: int) -> float:
    generator = OpenAIGenerator(url, model, concurrency=concurrency, timeout=600)
    started = time.perf_counter()
    generator.generate(prompts, SamplingParams(temperature=0, max_tokens=max_tokens, seed=0))
    return generator.usage.completion_tokens / (time.perf_counter() - started)
