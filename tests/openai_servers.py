"""A real OpenAI-compatible server process for tests: `python -m scoring.openai_server` on a
local model folder (the tiny test model), started and stopped by a test or fixture.

    with OpenAIServerProcess(folder, "--fail-every", "2") as server:
        OpenAIGenerator(server.base_url, server.model_name)
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
READY = re.compile(r"Serving (\S+) \(OpenAI-compatible\) at (\S+)")


class OpenAIServerProcess:
    def __init__(self, model_folder: Path, *options: str, device: str = "cpu"):
        self.command = [sys.executable, "-m", "scoring.openai_server", "--model", str(model_folder), "--port", "0",
                        "--device", device, *options]
        self.process: subprocess.Popen | None = None
        self.base_url = self.model_name = ""

    def start(self, timeout: float = 120.0) -> OpenAIServerProcess:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(self.command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, start_new_session=True)
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
                return self
        self.stop()
        raise RuntimeError("the OpenAI-compatible server did not start:\n" + "".join(seen)[-3000:])

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def __enter__(self) -> OpenAIServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
