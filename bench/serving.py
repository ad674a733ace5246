"""A minimal JSON-over-HTTP server: the base of the protocol servers Stepwise runs itself.

Stepwise talks to model servers by their public protocols (OpenAI-compatible generation,
vLLM's `/pooling`). Where no such server is installed (tests, a laptop), it serves the same
protocols itself from a local model with this base: a threading HTTP server from the
standard library, routes as plain functions `handler(body: dict) -> (status, dict)`.

    server = JSONServer({("POST", "/v1/completions"): complete}, port=0)
    server.serve_forever()      # or server.start() for a background thread

No Django, no torch: the route modules bring their own models.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Handler = Callable[[dict], tuple[int, dict]]
MAX_BODY = 64 * 1024 * 1024


class HTTPError(Exception):
    """Raised by a handler to answer with this status and message (OpenAI's error shape)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class JSONServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, routes: dict[tuple[str, str], Handler], *, host: str = "127.0.0.1", port: int = 0,
        api_key: str | None = None,
    ):
        self.routes = routes
        self.api_key = api_key  # when set, every request must send "Authorization: Bearer KEY" (vLLM's --api-key)
        super().__init__((host, port), _RequestHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, daemon=True)
        thread.start()
        return thread


class _RequestHandler(BaseHTTPRequestHandler):
    server: JSONServer
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: on a kept-alive connection (the openai client's), Nagle's algorithm held
    # each small reply until the client's delayed ACK, some 40 ms per request.
    disable_nagle_algorithm = True

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def log_message(self, format, *args):  # noqa: A002  (the stdlib's name)
        pass  # one line per request would drown a benchmark's output

    def _dispatch(self, method: str) -> None:
        self._body_read = False
        handler = self.server.routes.get((method, self.path.split("?", 1)[0]))
        if handler is None:
            return self._reply(404, _error(f"no route {method} {self.path}"))
        if self.server.api_key and self.headers.get("Authorization") != f"Bearer {self.server.api_key}":
            return self._reply(401, _error("invalid or missing API key"))
        try:
            status, body = handler(self._body())
        except HTTPError as error:
            status, body = error.status, _error(str(error))
        except (ValueError, KeyError, TypeError) as error:
            status, body = 400, _error(f"bad request: {error}")
        self._reply(status, body)

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise HTTPError(413, f"body over {MAX_BODY} bytes")
        if not length:
            return {}
        data, self._body_read = self.rfile.read(length), True
        body = json.loads(data)
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        return body

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if int(self.headers.get("Content-Length") or 0) and not self._body_read:
            # Refused unread (404, 401, 413): its body would be read as the next request.
            self.send_header("Connection", "close")
            self.close_connection = True
        # Headers and body in one write: one segment, where two let Nagle delay the second.
        self._headers_buffer.append(b"\r\n" + data)
        self.flush_headers()


def _error(message: str) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error"}}
