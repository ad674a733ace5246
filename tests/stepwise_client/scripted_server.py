"""A real HTTP server that fails as a test scripts it, then answers in Stepwise's client protocols."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# What each protocol answers for one solution of one step (or one prompt), once the failures are spent.
ANSWERS = {
    "/api/score": {"model": "m", "items": [{"steps": [{"p": 0.75, "mean": None, "sigma": None}],
                                            "score": {"product": 0.75, "min": 0.75, "last": 0.75, "mean": 0.75,
                                                      "sigma": None}}]},
    "/pooling": {"object": "list", "model": "m", "data": [{"index": 0, "object": "pooling", "data": [[0.25, 0.75]]}],
                 "usage": {"prompt_tokens": 5, "total_tokens": 5}},
    "/v1/completions": {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m",
                        "choices": [{"index": 0, "text": " 5", "finish_reason": "stop", "logprobs": None}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}},
}


class ScriptedServer:
    """Answers the first POSTs with the scripted (status, headers) failures, then as its protocol does."""

    def __init__(self, failures: list[tuple[int, dict]], *, answers: dict | None = None):
        self.failures, self.requests, self.answers = list(failures), 0, {**ANSWERS, **(answers or {})}
        self.bodies: list[dict] = []  # every request's JSON body, in the order they came
        self.headers: list[dict] = []  # every request's headers, a GET's too (a followed redirect may be one)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                server.headers.append(dict(self.headers))
                server.bodies.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0))))
                server.requests += 1
                status, headers = server.failures.pop(0) if server.failures else (200, {})
                body = json.dumps(server.answers[self.path] if status == 200 else {"error": {"message": "scripted"}})
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def do_GET(self):
                server.headers.append(dict(self.headers))
                server.requests += 1
                self.send_error(405)

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_port}"

    def __enter__(self):
        threading.Thread(target=self.http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.http.shutdown()
        self.http.server_close()
