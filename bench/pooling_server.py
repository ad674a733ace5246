"""`python -m bench.pooling_server --model FOLDER [--pooler-config JSON] --port P [--fail-every K]`:
vLLM's /pooling for a process reward model, where vLLM is not installed (tests, a laptop).

It stands in for `vllm serve FOLDER --runner pooling --pooler-config JSON` and follows vLLM's code
at commit 055e47c of vllm-project/vllm (`scoring.store.model_card.VLLM_VERSION`), file by file:

- What it serves (`vllm/model_executor/models/registry.py`, `models/adapters.py`,
  `models/qwen2_rm.py`): a `Qwen2ForProcessRewardModel` folder (Qwen2 backbone, score MLP
  Linear(H, H) -> ReLU -> Linear(H, 2) on the final-normed state), whose only task is
  `token_classify`, STEP pooling by default. A `*ForCausalLM` folder is converted to an embedding
  model (lm_head never built): it serves `embed` and `token_embed` only, so `token_classify` is
  refused with a 400. Any other architecture is refused at start (not mirrored here).
- The pooler config (`vllm/foundation/config/pooler.py`): `pooling_type` (or `tok_pooling_type`)
  STEP or ALL, `step_tag_id`, `returned_token_ids`, `use_activation`, `task`; unknown keys and
  `normalize` (removed) refuse to start. With no `step_tag_id`, STEP pooling returns every token.
- The request (`vllm/frontend/entrypoints/pooling/pooling/protocol.py` and `serving.py`,
  `vllm/frontend/processing/pooling_params.py`): `model` (404 if not the served name), `input`
  (string or list), `task` (default the model's task; another is a 400 "Unsupported task"),
  `dimensions` (400), `use_activation`; each input tokenized whole with the tokenizer's special tokens.
- The answer (`vllm/model_executor/layers/pooler/tokwise/methods.py` StepPool, `tokwise/heads.py`,
  `activations.py` PoolerClassify): the logits' `returned_token_ids` columns, the rows at each
  `step_tag_id`, then softmax over the row (sigmoid for one column) unless `use_activation` is false.

Only `encoding_format` "float" is answered (vLLM also has base64 and bytes). A Stepwise `head`
folder is first exported in the vLLM form (`export_checkpoint(..., serve_as="vllm")`) into a
temporary folder and served with its card's pooler config: what `vllm serve` of that export does.
`--dtype auto` is vLLM's (float16 for a float32 checkpoint); the default is the card's float32.

`--api-key KEY` makes every request send `Authorization: Bearer KEY`, as vLLM's does. `--fail-every K`
answers every K-th POST /pooling with a 503 before computing anything, so clients' retries can be
tested; GET /stats counts requests, failures and inputs scored.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from pathlib import Path

from bench.serving import HTTPError, JSONServer

PRM_ARCHITECTURE = "Qwen2ForProcessRewardModel"
GENERATE_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration", "ChatModel", "LMHeadModel")  # adapters.py
POOLER_KEYS = {"task", "pooling_type", "seq_pooling_type", "tok_pooling_type", "use_activation", "dimensions",
               "enable_chunked_processing", "max_embed_len", "logit_mean", "logit_sigma", "step_tag_id",
               "returned_token_ids"}
TOKEN_POOLING_TYPES = ("ALL", "STEP")


class ServeRefused(RuntimeError):
    """What vLLM refuses at start: the server never comes up."""


def pooler_config(given: dict | None) -> dict:
    """The pooler config as PoolerConfig resolves it for a token classifier (STEP by default)."""
    config = dict(given or {})
    unknown = sorted(set(config) - POOLER_KEYS - {"normalize"})
    if "normalize" in config:
        raise ServeRefused("Parameter `normalize` was removed; use `use_activation` instead.")
    if unknown:
        raise ServeRefused(f"PoolerConfig: unknown field(s) {unknown}: Extra inputs are not permitted")
    if config.get("pooling_type") and config.get("tok_pooling_type"):
        raise ServeRefused("Cannot set both `pooling_type` and `tok_pooling_type`")
    kind = config.get("tok_pooling_type") or config.get("pooling_type") or "STEP"
    if kind not in TOKEN_POOLING_TYPES:
        raise ServeRefused(f"pooling_type {kind!r}: a process reward model pools tokenwise ({TOKEN_POOLING_TYPES})")
    return config | {"tok_pooling_type": kind}


class PoolingModel:
    """A folder served as vLLM serves it; one forward at a time (the model is shared)."""

    def __init__(self, folder: str | Path, *, served_name: str, pooler: dict | None = None, fail_every: int = 0,
                 device: str | None = None, dtype: str = "float32", tokenizer: str | Path | None = None):
        folder, pooler = self._servable(Path(folder), pooler)
        self.tokenizer_folder = Path(tokenizer) if tokenizer else self._tokenizer_of(folder)
        self.architecture = _architecture(folder)
        self.served_name = served_name
        self.pooler = pooler_config(pooler)
        self.supported_tasks = self._tasks()
        self.fail_every = fail_every
        self.stats = {"requests": 0, "failed": 0, "inputs_scored": 0}
        self._lock = threading.Lock()
        self.step_tag_id = self.pooler.get("step_tag_id")
        self.positive_index = 1  # rows are [P(label 0), P(label 1)]; label 1 is "good" in Stepwise's export
        if self.supported_tasks == ("token_classify",):
            self._load(folder, device=device, dtype=dtype)

    def _servable(self, folder: Path, pooler: dict | None) -> tuple[Path, dict | None]:
        """A Stepwise head folder becomes its vLLM export (kept alive as long as this model)."""
        config = folder / "stepwise.json"
        if not config.exists() or json.loads(config.read_text()).get("kind") != "head":
            return folder, pooler
        from scoring.store.checkpoint_export import export_checkpoint
        from scoring.store.model_card import vllm_pooler_config

        self._export_dir = tempfile.TemporaryDirectory(prefix="vllm-form-")
        exported = export_checkpoint(folder, Path(self._export_dir.name) / folder.name, serve_as="vllm")
        return exported.folder, pooler if pooler is not None else vllm_pooler_config(exported.config)

    def _tokenizer_of(self, folder: Path) -> Path:
        """vLLM's default is the model folder; an export made here is served with its tokenizer subfolder."""
        return folder / "tokenizer" if hasattr(self, "_export_dir") else folder

    def _tasks(self) -> tuple[str, ...]:
        if self.architecture == PRM_ARCHITECTURE:
            return ("token_classify",)
        if self.architecture.endswith(GENERATE_SUFFIXES):  # --runner pooling converts it: as_embedding_model
            return ("embed", "token_embed")
        raise ServeRefused(f"{self.architecture}: this stand-in serves {PRM_ARCHITECTURE} and converted causal LMs "
                           "only, as vLLM does for token_classify with STEP pooling")

    def _load(self, folder: Path, *, device: str | None, dtype: str) -> None:
        import torch
        from safetensors.torch import load_file
        from transformers import AutoModel, AutoTokenizer

        # vLLM's "auto": float16 for a float32 (or float16) checkpoint, bfloat16 for a bfloat16 one.
        torch_dtype = torch.float16 if dtype == "auto" else getattr(torch, dtype)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_folder)
        self.backbone = AutoModel.from_pretrained(folder, dtype=torch_dtype).to(self.device).eval()
        weights = load_file(folder / "model.safetensors")
        hidden = self.backbone.config.hidden_size
        self.score = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))
        self.score.load_state_dict({name.removeprefix("score."): value for name, value in weights.items()
                                    if name.startswith("score.")})
        self.score.to(self.device, torch.float32).eval()  # head_dtype: float32

    def pool(self, body: dict) -> tuple[int, dict]:
        texts, use_activation = self._request(body)
        with self._lock:
            self.stats["requests"] += 1
            if self.fail_every and self.stats["requests"] % self.fail_every == 0:
                self.stats["failed"] += 1
                raise HTTPError(503, f"injected failure (every {self.fail_every}th request)")
            ids = [self.tokenizer(text)["input_ids"] for text in texts]
            data = [self._rows(token_ids, use_activation) for token_ids in ids]
            self.stats["inputs_scored"] += len(texts)
        tokens = sum(len(token_ids) for token_ids in ids)
        return 200, {"id": f"pool-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
                     "model": self.served_name,
                     "data": [{"index": i, "object": "pooling", "data": rows} for i, rows in enumerate(data)],
                     "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}}

    def _request(self, body: dict) -> tuple[list[str], bool]:
        """The checks of serving.py's _verify_pooling_task and pooling_params.py, in their order."""
        if body.get("model") not in (None, self.served_name):
            raise HTTPError(404, f"The model `{body['model']}` does not exist.")
        if body.get("dimensions") is not None:
            raise HTTPError(400, "dimensions is currently not supported")
        task = body.get("task") or self.supported_tasks[0]
        if task not in self.supported_tasks:
            raise HTTPError(400, f"Unsupported task: {task!r} Supported tasks: {self.supported_tasks}")
        if body.get("encoding_format", "float") != "float":
            raise HTTPError(400, "this stand-in answers encoding_format 'float' only")
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            raise HTTPError(400, "'input' must be a non-empty string or a non-empty list of them")
        use_activation = body.get("use_activation")
        if use_activation is None:
            use_activation = self.pooler.get("use_activation", True)
        return texts, bool(use_activation)

    def _rows(self, token_ids: list[int], use_activation: bool) -> list[list[float]]:
        """Qwen2ForProcessRewardModel.forward, then StepPool and TokenClassifierPoolerHead."""
        import torch

        with torch.no_grad():
            hidden = self.backbone(input_ids=torch.tensor([token_ids], device=self.device)).last_hidden_state[0]
            data = self.score(hidden.float())
        if self.pooler["tok_pooling_type"] == "STEP":
            if self.pooler.get("returned_token_ids"):
                data = data[:, self.pooler["returned_token_ids"]]
            if self.step_tag_id is not None:
                data = data[torch.tensor(token_ids, device=self.device) == self.step_tag_id]
        if use_activation:
            data = data.sigmoid() if data.shape[-1] < 2 else data.softmax(-1)
        return data.tolist()

    def models(self, _body: dict) -> tuple[int, dict]:
        return 200, {"object": "list", "data": [{"id": self.served_name, "object": "model", "owned_by": "stepwise"}]}

    def stats_answer(self, _body: dict) -> tuple[int, dict]:
        with self._lock:
            return 200, dict(self.stats)


def _architecture(folder: Path) -> str:
    config = folder / "config.json"
    architectures = json.loads(config.read_text()).get("architectures") if config.exists() else None
    if not architectures:
        raise ServeRefused(f"{folder}: no config.json naming its architectures")
    return str(architectures[0])


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
    parser.add_argument("--model", required=True, help="a Qwen2ForProcessRewardModel folder, or a Stepwise head folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default="", help="the name clients send (default: the folder's name)")
    parser.add_argument("--tokenizer", default=None, help="as vllm serve's (default: the model folder)")
    parser.add_argument("--pooler-config", type=json.loads, default=None, help="as vllm serve's (a JSON object)")
    parser.add_argument("--fail-every", type=int, default=0, help="answer every K-th /pooling request with a 503")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY', as vLLM's --api-key")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: the best there is)")
    parser.add_argument("--dtype", default="float32", choices=["auto", "float32", "bfloat16", "float16"])
    args = parser.parse_args(argv)
    try:
        model = PoolingModel(args.model, served_name=args.served_model_name or Path(args.model).resolve().name,
                             pooler=args.pooler_config, fail_every=args.fail_every, device=args.device,
                             dtype=args.dtype, tokenizer=args.tokenizer)
    except ServeRefused as error:
        raise SystemExit(f"refused: {error}") from None
    server = make_server(model, host=args.host, port=args.port, api_key=args.api_key)
    # One line with everything a client's config needs; tests wait for it.
    print(f"serving {model.served_name!r} ({model.architecture}) at {server.url}/pooling: pooler_config="
          f"{json.dumps(model.pooler)}, positive_index={model.positive_index}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
