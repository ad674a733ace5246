"""`python -m bench.pooling_server --model FOLDER --port P [--fail-every K]`: vLLM's /pooling, from a local PRM.

It stands in for `vllm serve MODEL --runner pooling --pooler-config '{"pooling_type": "STEP",
"step_tag_id": T, "returned_token_ids": [A, B]}'` where vLLM is not installed (tests, a
laptop): the same request and answer shapes (see `scoring.store.remote_scorer` for the protocol
and where it is documented), computed by a Stepwise model folder (`prm.load_prm`).

As vLLM's STEP pooler does, it tokenizes each input text whole and answers one row per
occurrence of the step tag token T, the row being the model's two probabilities there:
[P(good), P(bad)] for a `step_token` model (its returned token ids are its good and bad
tokens), [P(label 0), P(label 1)] for a `token_classification` one, [1 - p, p] for a
`head` model (a 2-label classifier whose label 1 is "good"). T defaults to the last token of
the model's separator; the beginning-of-sequence token is prepended as local scoring does.

`--api-key KEY` makes every request send `Authorization: Bearer KEY`, as
vLLM's does. `--fail-every K` answers every K-th POST /pooling with a 503 before computing anything, so
clients' retries can be tested; GET /stats counts requests, failures and inputs scored.
"""
from __future__ import annotations

import argparse
import threading
import time
import uuid
from pathlib import Path

from bench.serving import HTTPError, JSONServer


class PoolingModel:
    """A loaded PRM answering STEP pooling requests; one forward at a time (the model is shared)."""

    def __init__(self, folder: str | Path, *, served_name: str, step_tag_id: int | None = None,
                 fail_every: int = 0, device: str | None = None, dtype: str = "auto"):
        import torch

        from scoring.core.prm import load_prm

        torch_dtype = None if dtype == "auto" else getattr(torch, dtype)  # auto: as local scoring chooses
        self.prm = load_prm(folder, device=device, dtype=torch_dtype)
        self.served_name = served_name
        self.step_tag_id = step_tag_id if step_tag_id is not None else self._separator_token()
        self.fail_every = fail_every
        self.stats = {"requests": 0, "failed": 0, "inputs_scored": 0}
        self._lock = threading.Lock()

    def _separator_token(self) -> int:
        return self.prm.tokenizer(self.prm.separator, add_special_tokens=False)["input_ids"][-1]

    @property
    def positive_index(self) -> int:
        """Which entry of a row is P(good): what a client's config must say."""
        if self.prm.kind == "step_token":
            return 0
        return int(self.prm.config.get("positive_label", 1)) if self.prm.kind == "token_classification" else 1

    def pool(self, body: dict) -> tuple[int, dict]:
        texts = self._inputs(body)
        with self._lock:
            self.stats["requests"] += 1
            if self.fail_every and self.stats["requests"] % self.fail_every == 0:
                self.stats["failed"] += 1
                raise HTTPError(503, f"injected failure (every {self.fail_every}th request)")
            encoded = [self._encode(text) for text in texts]
            results = self.prm.probabilities_for_encoded(encoded)
            self.stats["inputs_scored"] += len(texts)
        data = [{"index": i, "object": "pooling", "data": [self._row(s.p) for s in steps]}
                for i, steps in enumerate(results)]
        tokens = sum(len(e.ids) for e in encoded)
        return 200, {"id": f"pool-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
                     "model": self.served_name, "data": data,
                     "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}}

    def _inputs(self, body: dict) -> list[str]:
        if body.get("model") not in (None, self.served_name):
            raise HTTPError(404, f"The model `{body['model']}` does not exist.")
        if body.get("task") not in (None, "token_classify"):
            raise HTTPError(400, f"task {body['task']!r} is not supported by this model (token_classify is)")
        if body.get("encoding_format", "float") != "float":
            raise HTTPError(400, "only encoding_format 'float' is served here")
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            raise HTTPError(400, "'input' must be a non-empty string or a non-empty list of them")
        return texts

    def _encode(self, text: str):
        from scoring.core.encoding import Encoded
        from scoring.core.step_marker import marker_id, whole_text_ids

        tokenizer = self.prm.tokenizer
        if marker_id(tokenizer, self.prm.separator) is not None:
            # As vLLM tokenizes a /pooling input (the tokenizer's own special tokens), and as Stepwise
            # reads a model with a step marker: the two agree exactly.
            ids = whole_text_ids(tokenizer, [text])[0]
        else:  # a model from before the step marker: local scoring prepends BOS to its pieces
            start = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
            ids = start + tokenizer(text, add_special_tokens=False)["input_ids"]
        return Encoded(ids=ids, positions=[i for i, token in enumerate(ids) if token == self.step_tag_id])

    def _row(self, p: float) -> list[float]:
        return [p, 1.0 - p] if self.positive_index == 0 else [1.0 - p, p]

    def models(self, _body: dict) -> tuple[int, dict]:
        return 200, {"object": "list", "data": [{"id": self.served_name, "object": "model", "owned_by": "stepwise"}]}

    def stats_answer(self, _body: dict) -> tuple[int, dict]:
        with self._lock:
            return 200, dict(self.stats)


def make_server(
    model: PoolingModel, *, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None
) -> JSONServer:
    return JSONServer(
        {("POST", "/pooling"): model.pool, ("GET", "/v1/models"): model.models,
         ("GET", "/health"): lambda _body: (200, {}), ("GET", "/stats"): model.stats_answer},
        host=host, port=port, api_key=api_key,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a Stepwise model folder (stepwise.json)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default="", help="the name clients send (default: the folder's name)")
    parser.add_argument("--step-tag-id", type=int, default=None, help="default: the separator's last token")
    parser.add_argument("--fail-every", type=int, default=0, help="answer every K-th /pooling request with a 503")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY', as vLLM's --api-key")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: the best there is)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    args = parser.parse_args(argv)
    model = PoolingModel(args.model, served_name=args.served_model_name or Path(args.model).resolve().name,
                         step_tag_id=args.step_tag_id, fail_every=args.fail_every, device=args.device,
                         dtype=args.dtype)
    server = make_server(model, host=args.host, port=args.port, api_key=args.api_key)
    # One line with everything a client's config needs; tests wait for it.
    print(f"serving {model.served_name!r} ({model.prm.kind}) at {server.url}/pooling: step_tag_id="
          f"{model.step_tag_id}, separator={model.prm.separator!r}, positive_index={model.positive_index}",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
