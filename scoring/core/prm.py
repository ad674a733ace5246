"""Process reward models: load one from a local folder and score every step of a solution.

Plain PyTorch/transformers, no Django: the Django side feeds rows in and stores what comes out.

The on-disk format of a model folder (shared with training, which writes new versions in it)
is described and checked in `scoring.core.model_files`, whose names are re-exported here. The
token ids and step positions fed to the model come from `scoring.core.encoding`.

A solution is scored in ONE forward pass: the problem, then each step followed by the
separator; the step's score is read at the separator's last token. For a causal backbone that
position sees exactly the prefix up to and including the step, so it equals scoring each
prefix separately (`score_per_prefix`, the slow reference), only ~n times cheaper. A public
checkpoint reads its model card's own input instead (`encoding`'s `input_format`), in one pass too.

How a folder's tokenizer and weights are loaded (safetensors only, no remote code unless asked,
device and precision, one shared copy of each backbone) is `scoring.core.model_loading`'s;
Qwen2.5-Math-PRM's `Qwen2ForProcessRewardModel`, which ships as remote code, loads there as
`scoring.core.process_reward.ProcessRewardModel`, without running any code from the folder.
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from scoring.core.encoding import Encoded, Item, encode, encode_many, input_format, token_budget_batches
from scoring.core.model_files import (
    CONFIG_NAME,
    DEFAULT_SEPARATOR,
    HEAD_NAME,
    IDENTITY_GLOBS,
    KINDS,
    META_NAME,
    PICKLE_SUFFIXES,
    ModelFormatError,
    backbone_folder,
    check_safetensors_only,
    hash_files,
    identity_files,
    read_model_config,
    validate_config,
    weights_sha256,
    write_model_config,
)
from scoring.core.model_loading import (
    backbone_class,
    build_model,
    choose_device,
    choose_dtype,
    load_model,
    shared_backbone,
)
from scoring.core.process_reward import PROCESS_REWARD_ARCHITECTURES, ProcessRewardModel
from scoring.core.step_scores import StepProbability, aggregate, build_input

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    # Re-exported (the format and the step scores are part of prm's API).
    "CONFIG_NAME", "DEFAULT_SEPARATOR", "HEAD_NAME", "IDENTITY_GLOBS", "KINDS", "META_NAME", "PICKLE_SUFFIXES",
    "ModelFormatError", "StepProbability", "aggregate", "backbone_folder", "build_input", "check_safetensors_only",
    "hash_files", "identity_files", "read_model_config", "validate_config", "weights_sha256", "write_model_config",
    "PROCESS_REWARD_ARCHITECTURES", "ProcessRewardModel",
    # Re-exported: how a folder is loaded (scoring.core.model_loading).
    "backbone_class", "build_model", "choose_device", "choose_dtype", "load_model",
    # Defined here.
    "LoadedPRM", "StepHead", "default_token_budget", "load_prm", "save_head_model",
]


# --- the step head -----------------------------------------------------------------------


class StepHead(nn.Module):
    """A linear head on the backbone's hidden state at each separator.

    point: mu_logit only, p = sigmoid(mu_logit).
    beta:  also kappa = softplus(.) + 1e-4, the concentration of a Beta(mu*k, (1-mu)*k),
           so sigma = sqrt(mu(1-mu)/(kappa+1)) says how sure the head is.
    """

    def __init__(self, hidden_size: int, head_type: str = "point"):
        super().__init__()
        if head_type not in ("point", "beta"):
            raise ModelFormatError(f"head.type must be 'point' or 'beta', not {head_type!r}")
        self.hidden_size = hidden_size
        self.head_type = head_type
        self.mu = nn.Linear(hidden_size, 1)
        self.kappa = nn.Linear(hidden_size, 1) if head_type == "beta" else None

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        mu_logit = self.mu(h).squeeze(-1)
        if self.kappa is None:
            return mu_logit, None
        return mu_logit, nn.functional.softplus(self.kappa(h).squeeze(-1)) + 1e-4

    @torch.inference_mode()
    def probabilities(self, h: torch.Tensor) -> list[StepProbability]:
        """Step probabilities for hidden states [n, H] (computed in float32)."""
        mu_logit, kappa = self(h.float())
        mu = torch.sigmoid(mu_logit)
        if kappa is None:
            return [StepProbability(p=float(m)) for m in mu.tolist()]
        sigma = torch.sqrt(mu * (1 - mu) / (kappa + 1))
        return [StepProbability(p=float(m), mean=float(m), sigma=float(s)) for m, s in zip(mu.tolist(), sigma.tolist())]

    def config(self, layer: int | None) -> dict[str, Any]:
        return {"type": self.head_type, "layer": layer, "hidden_size": self.hidden_size}

    def save(self, folder: str | Path) -> None:
        state = {name: tensor.detach().float().cpu().contiguous() for name, tensor in self.state_dict().items()}
        save_file(state, str(Path(folder) / HEAD_NAME))

    @classmethod
    def load(cls, folder: str | Path, head_config: dict[str, Any]) -> StepHead:
        path = Path(folder) / HEAD_NAME
        if not path.exists():
            raise ModelFormatError(f"{path} is missing (kind 'head' needs it)")
        try:
            head = cls(int(head_config["hidden_size"]), head_config.get("type", "point"))
        except (KeyError, TypeError, ValueError) as error:
            raise ModelFormatError(f"{CONFIG_NAME}: bad 'head' section {head_config!r}: {error}") from None
        try:
            head.load_state_dict(load_file(str(path)))
        except RuntimeError as error:
            raise ModelFormatError(f"{path} does not match head config {head_config!r}: {error}") from None
        return head


def save_head_model(
    folder: str | Path, *, head: StepHead, backbone: str, layer: int | None = None,
    separator: str = DEFAULT_SEPARATOR, meta: dict[str, Any] | None = None,
) -> Path:
    """Write a complete kind-'head' model folder (config, head weights, optional metadata)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    head.save(folder)
    write_model_config(
        folder, {"kind": "head", "backbone": backbone, "separator": separator, "head": head.config(layer)}
    )
    if meta is not None:
        (folder / META_NAME).write_text(json.dumps(meta, indent=2) + "\n")
    return folder


# --- the loaded model ----------------------------------------------------------------------


@dataclass
class LoadedPRM:
    """A PRM ready to score: backbone, tokenizer and the kind-specific read-out."""

    kind: str
    config: dict[str, Any]
    model: PreTrainedModel | ProcessRewardModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    dtype: torch.dtype
    head: StepHead | None = None
    max_tokens: int = 16384
    # Counts forward calls, so callers (and tests) can see that nothing was recomputed.
    forward_passes: int = 0

    @property
    def separator(self) -> str:
        separator: str = self.config.get("separator", DEFAULT_SEPARATOR)
        return separator

    @property
    def input_format(self) -> str:
        return input_format(self.config)

    def encode(self, problem: str, steps: Sequence[str]) -> Encoded:
        return encode(self.tokenizer, problem, steps, separator=self.separator, input_format=self.input_format)

    def encode_many(self, items: Sequence[Item]) -> list[Encoded]:
        return encode_many(self.tokenizer, items, separator=self.separator, input_format=self.input_format)

    def step_probabilities(self, items: Sequence[Item]) -> list[list[StepProbability]]:
        """Per-step probabilities for each (problem, steps), one forward pass per solution."""
        return self.probabilities_for_encoded(self.encode_many(items))

    def score_counting_tokens(self, items: Sequence[Item]) -> tuple[list[list[StepProbability]], int]:
        """step_probabilities, and the tokens the model read (rescoring's tokens/s); a remote
        scorer (scoring.store.remote_scorer) answers the same call."""
        encoded = self.encode_many(items)
        return self.probabilities_for_encoded(encoded), self.count_tokens(encoded)

    def probabilities_for_encoded(self, encoded: Sequence[Encoded]) -> list[list[StepProbability]]:
        results: list[list[StepProbability]] = [[] for _ in encoded]
        for batch, rows in self._forward_batches(encoded, layer=self._head_layer()):
            # One read-out per batch: one head call and one copy to the host, not one per solution.
            read = iter(self._read_out(rows))
            for index in batch:
                results[index] = [next(read) for _ in encoded[index].positions]
        return results

    def step_features(self, items: Sequence[Item], layer: int | None = None) -> list[torch.Tensor]:
        """Hidden states [n_steps, H] (float32, CPU) at each separator: what the head sees."""
        encoded = self.encode_many(items)
        results: list[torch.Tensor] = [torch.empty(0) for _ in encoded]
        for batch, rows in self._forward_batches(encoded, layer=layer, features=True):
            counts = [len(encoded[index].positions) for index in batch]
            for index, solution_rows in zip(batch, torch.split(rows.float().cpu(), counts)):
                # A clone outside inference mode is a normal tensor: training can backprop through a
                # head on it; and one of its own, not a view sharing the batch's storage.
                results[index] = solution_rows.clone()
        return results

    def forward_only(self, encoded: Sequence[Encoded]) -> None:
        """The bare model forward on the same batches as scoring, without the read-out (benchmarks)."""
        for _ in self._forward_batches(encoded, layer=self._head_layer()):
            pass

    def count_tokens(self, encoded: Sequence[Encoded]) -> int:
        return sum(len(e.ids) for e in encoded)

    # The read-out rows are, per kind: hidden states (head), logits over the vocabulary
    # (step_token) or over the 2 labels (token_classification), at the step positions.
    def _head_layer(self) -> int | None:
        return self.config["head"].get("layer") if self.kind == "head" else None

    def _read_out(self, rows: torch.Tensor) -> list[StepProbability]:
        if self.kind == "head":
            assert self.head is not None
            return self.head.probabilities(rows)
        if self.kind == "step_token":
            pair = rows[:, [self.config["good_token_id"], self.config["bad_token_id"]]].float()
            return [StepProbability(p=float(p)) for p in pair.softmax(-1)[:, 0].tolist()]
        positive = int(self.config.get("positive_label", 1))
        return [StepProbability(p=float(p)) for p in rows.float().softmax(-1)[:, positive].tolist()]

    @torch.inference_mode()
    def _forward_batches(
        self, encoded: Sequence[Encoded], *, layer: int | None, features: bool = False
    ) -> Iterator[tuple[list[int], torch.Tensor]]:
        """(indices of the batch, the read-out rows of all its steps, solution after solution)."""
        lengths = [len(e.ids) for e in encoded]
        for batch in token_budget_batches(lengths, max_tokens=self.max_tokens):
            ids, mask = self.padded_batch([encoded[i].ids for i in batch])
            rows = torch.tensor([row for row, i in enumerate(batch) for _ in encoded[i].positions], dtype=torch.long)
            columns = torch.tensor([position for i in batch for position in encoded[i].positions], dtype=torch.long)
            mask = mask if mask is None else self._to_device(mask)
            states = self._forward(self._to_device(ids), mask, layer=layer, features=features)
            yield batch, states[self._to_device(rows), self._to_device(columns)]

    def padded_batch(self, id_lists: Sequence[list[int]]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A batch's ids right-padded (on the host), and its attention mask, scoring's and training's:
        None for a model that reads causally (its tokens never attend to the padding after them)."""
        width = max(len(ids) for ids in id_lists)
        ids = torch.tensor([row + [0] * (width - len(row)) for row in id_lists])
        if self.reads_causally:
            return ids, None
        return ids, torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in id_lists])

    @cached_property
    def reads_causally(self) -> bool:
        """Whether every attention layer reads only the tokens up to each (transformers' `is_causal`),
        as one forward per solution needs: then a batch needs no mask and takes attention's fast path
        (a CPU batch with one token of padding took 1.66x as long). Both ways, or unsaid: masked."""
        flags = {getattr(module, "is_causal", None) for module in self.model.modules()}
        return flags & {True, False} == {True}

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """A batch's host tensor on the model's device; to a GPU from pinned memory, without
        waiting for the copy (the forward queued after it waits for it on the same stream)."""
        if self.device.type != "cuda":
            return tensor.to(self.device)
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor | None, *, layer: int | None,
                 features: bool) -> torch.Tensor:
        self.forward_passes += 1
        if self.kind == "head" or features:
            wants_layer = layer is not None
            out = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=wants_layer)
            states: torch.Tensor = out.hidden_states[layer] if wants_layer else out.last_hidden_state
            return states
        logits: torch.Tensor = self.model(input_ids=ids, attention_mask=mask).logits
        return logits

    def score_per_prefix(self, items: Sequence[Item]) -> list[list[StepProbability]]:
        """The slow reference: one forward per step prefix, each read at its last token."""
        results = []
        for problem, steps in items:
            full = self.encode(problem, steps)
            prefixes = [Encoded(ids=full.ids[: pos + 1], positions=[pos]) for pos in full.positions]
            scores = []
            for prefix in prefixes:
                # One prefix per batch on purpose: this is the per-prefix loop being measured.
                with torch.inference_mode():
                    ids = torch.tensor([prefix.ids], device=self.device)
                    states = self._forward(ids, torch.ones_like(ids), layer=self._head_layer(), features=False)
                scores.extend(self._read_out(states[0, prefix.positions]))
            results.append(scores)
        return results


def load_prm(
    folder: str | Path, *, device: str | torch.device | None = None, dtype: torch.dtype | None = None,
    trust_remote_code: bool = False, max_tokens: int | None = None,
) -> LoadedPRM:
    """Load a model folder (see the module docstring). Safetensors only; no remote code unless asked.

    The backbone and tokenizer are the process's shared ones (`model_loading.shared_backbone`):
    a version on a backbone already loaded for the same device and dtype costs its head only.
    """
    folder = Path(folder).resolve()
    config = read_model_config(folder)
    input_format(config, where=str(folder / CONFIG_NAME))
    backbone = backbone_folder(folder, config)
    check_safetensors_only(backbone)
    device = torch.device(device) if device is not None else choose_device()
    dtype = dtype or choose_dtype(device)
    model, tokenizer = shared_backbone(backbone, config["kind"], device=device, dtype=dtype,
                                       trust_remote_code=trust_remote_code)
    head = None
    if config["kind"] == "head":
        head = StepHead.load(folder, config["head"]).to(device).eval()
        if head.hidden_size != model.config.hidden_size:
            raise ModelFormatError(
                f"{folder / CONFIG_NAME}: head.hidden_size {head.hidden_size} "
                f"!= backbone hidden size {model.config.hidden_size}"
            )
    if config["kind"] == "token_classification" and getattr(model.config, "num_labels", 2) != 2:
        raise ModelFormatError(f"{backbone}: a token-classification PRM needs 2 labels, has {model.config.num_labels}")
    return LoadedPRM(kind=config["kind"], config=config, model=model, tokenizer=tokenizer, device=device,
                     dtype=dtype, head=head, max_tokens=max_tokens or default_token_budget(device))


def default_token_budget(device: torch.device) -> int:
    """Tokens per forward batch. Accelerators want wide batches; on a CPU, batches past a few
    solutions only add padding and cache misses (measured here with SmolLM2 in bf16: 2,322
    tokens/s at 4,096 tokens per batch against 1,554 at 16,384)."""
    return 16384 if device.type in ("cuda", "mps") else 4096
