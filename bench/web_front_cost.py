"""The web front's own CPU per request (infra/web_front.py), without Django or a socket.

`.venv/bin/python bench/web_front_cost.py [--requests 20000]`: requests with a 3-byte body go
through `WholeRequestFront` to a WSGI application that answers 4,000 bytes at once (a labeling
page's size), 4 at a time on one event loop, as uvicorn would hand them over; prints this
process's CPU and the wall time per request. What it measures is the front's part of every
request: reading the body, crossing to a Django thread and back, sending the answer.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.web_front import WholeRequestFront  # noqa: E402  (the checkout's own, as run from bench/)

SCOPE = {"type": "http", "method": "POST", "path": "/", "query_string": b"", "headers": [(b"content-length", b"3")],
         "http_version": "1.1", "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000)}


def page(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/html")])
    return [b"x" * 4000]


async def serve(front: WholeRequestFront, requests: int, concurrent: int = 4) -> None:
    async def receive():
        return {"type": "http.request", "body": b"abc", "more_body": False}

    async def send(message):
        pass

    async def client():
        for _ in range(requests // concurrent):
            await front(SCOPE, receive, send)

    await asyncio.gather(*(client() for _ in range(concurrent)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    requests = parser.parse_args().requests
    front = WholeRequestFront(page, threads=4, max_body=1 << 20, memory_body=1024, body_timeout=5)
    asyncio.run(serve(front, 400))  # warm-up: threads started, code paths taken once
    cpu, wall = time.process_time(), time.perf_counter()
    asyncio.run(serve(front, requests))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"web front: {cpu / requests * 1e6:.0f} us CPU and {wall / requests * 1e6:.0f} us wall per request "
          f"({requests:,} requests, 4 at a time)")


if __name__ == "__main__":
    main()
