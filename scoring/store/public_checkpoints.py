"""Public PRM checkpoint folders described as Stepwise models (their stepwise.json).

- `math_shepherd`: a causal LM read at the step tag `ки` (appended after each step), P(good) =
  softmax over the `+` / `-` token logits there (kind step_token).
- `qwen_prm`: `<extra_0>` appended after each step, softmax(...)[1] of a 2-label token classifier
  read there (kind token_classification). The real Qwen2.5-Math-PRM ships its own modeling code
  (`Qwen2ForProcessRewardModel`), so it loads only with trust_remote_code, which the version's
  admin flag (and STEPWISE_ALLOW_TRUST_REMOTE_CODE) must allow; a Qwen-style folder of a stock
  token-classification architecture needs no remote code.
- `token_classification`: any 2-label token classifier, read at a separator you name.

Ids come, in order, from the options given, from the folder's own stepwise.json or config.json
(`step_tag_id`, `good_token_id`, `bad_token_id`), then from the tokenizer. No torch, no Django.
"""
from __future__ import annotations

from pathlib import Path

from scoring.core import step_marker
from scoring.core.model_files import (
    CONFIG_NAME,
    ModelFormatError,
    check_safetensors_only,
    read_json_object,
    validate_config,
)

STYLES = {
    "math_shepherd": {"kind": "step_token", "separator": " ки", "good": "+", "bad": "-"},
    "qwen_prm": {"kind": "token_classification", "separator": "<extra_0>"},
    "token_classification": {"kind": "token_classification", "separator": "\n\n"},
    "step_token": {"kind": "step_token", "separator": " ки", "good": "+", "bad": "-"},
}


def describe_checkpoint(
    folder: str | Path, *, style: str, separator: str | None = None,
    good_token: str | None = None, bad_token: str | None = None, trust_remote_code: bool = False,
) -> dict:
    """The stepwise.json for a public checkpoint folder, checked against its tokenizer and its weights."""
    from transformers import AutoTokenizer  # transformers: the web process never loads it

    if style not in STYLES:
        raise ModelFormatError(f"--style must be one of {', '.join(STYLES)}, not {style!r}")
    folder = Path(folder).resolve()
    check_safetensors_only(folder)
    defaults, found = STYLES[style], _ids_in_folder(folder)
    _check_architecture(folder, defaults["kind"], style)
    check_buildable(folder, defaults["kind"], trust_remote_code=trust_remote_code)
    separator = separator or found.get("separator") or defaults["separator"]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = {"kind": defaults["kind"], "backbone": ".", "separator": separator,
              "step_tag_id": _tag_id(tokenizer, separator, found.get("step_tag_id"))}
    if defaults["kind"] == "token_classification":
        config["positive_label"] = int(found.get("positive_label", 1))
    else:
        config["step_tag"] = separator
        config["good_token_id"] = _label_id(tokenizer, good_token, found.get("good_token_id"), defaults["good"], "good")
        config["bad_token_id"] = _label_id(tokenizer, bad_token, found.get("bad_token_id"), defaults["bad"], "bad")
        if config["good_token_id"] == config["bad_token_id"]:
            raise ModelFormatError(f"good and bad token are the same id {config['good_token_id']}")
    validate_config(config, where=str(folder / CONFIG_NAME))
    step_marker.require_step_marker(tokenizer, separator, where=str(folder))
    return config


ARCHITECTURE_SUFFIX = {"step_token": "ForCausalLM", "token_classification": "ForTokenClassification"}


def _check_architecture(folder: Path, kind: str, style: str) -> None:
    """A folder of the wrong class would load with a freshly initialised read-out (random scores)."""
    config = read_json_object(folder / "config.json")
    own = read_json_object(folder / CONFIG_NAME).get("kind") if (folder / CONFIG_NAME).exists() else None
    if own is not None and own != kind:
        raise ModelFormatError(f"{folder / CONFIG_NAME} says kind {own!r}; --style {style} is kind {kind!r}")
    architectures = config.get("architectures") or []
    if config.get("auto_map") or any(a.endswith(ARCHITECTURE_SUFFIX[kind]) for a in architectures):
        return  # a remote-code model names its own classes; loading it needs the admin flag
    raise ModelFormatError(
        f"{folder / 'config.json'}: architectures {architectures} has no *{ARCHITECTURE_SUFFIX[kind]} "
        f"model, which --style {style} reads"
    )


def check_buildable(folder: Path, kind: str, *, trust_remote_code: bool = False) -> None:
    """Build the model as scoring will load it, shapes only (meta device, no weights read), and refuse
    a folder transformers cannot build or whose checkpoint lacks weights that model needs (loading
    would initialise them at random: e.g. Qwen2.5-Math-PRM's `Qwen2ForProcessRewardModel` head read
    as a stock `Qwen2ForTokenClassification`). Refused here, not at the first rescore."""
    # torch, transformers (and scoring.core.prm, which imports torch): the web process never loads them.
    import torch
    from transformers import AutoConfig

    from scoring.core.prm import backbone_class

    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = backbone_class(kind).from_config(config, trust_remote_code=trust_remote_code)
    except Exception as error:  # transformers raises many kinds here; each means "cannot build"
        raise ModelFormatError(
            f"{folder}: transformers cannot build this model as {backbone_class(kind).__name__}: "
            f"{type(error).__name__}: {str(error)[:300]}"
        ) from None
    missing = sorted(set(model.state_dict()) - _checkpoint_keys(folder) - _tied_keys(model))
    if missing:
        raise ModelFormatError(
            f"{folder}: {type(model).__name__} (what config.json's architectures {config.architectures} load as) "
            f"needs weights the checkpoint does not hold, which would be initialised at random: "
            f"{', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}"
        )


def _checkpoint_keys(folder: Path) -> set[str]:
    from safetensors import safe_open  # safetensors: only registering a public checkpoint reads its keys

    keys: set[str] = set()
    for path in folder.glob("model*.safetensors"):
        with safe_open(str(path), framework="pt") as handle:  # reads the header only
            keys.update(handle.keys())
    return keys


def _tied_keys(model) -> set[str]:
    """Weights the model ties to others (an lm_head tied to the embeddings is not stored)."""
    tied = getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or {}
    if not getattr(model.config, "tie_word_embeddings", False):
        return set()
    return set(tied) if isinstance(tied, dict | list | set | tuple) else set()


def _ids_in_folder(folder: Path) -> dict:
    """What the folder itself says: its stepwise.json, else the id fields of its config.json."""
    for name in (CONFIG_NAME, "config.json"):
        path = folder / name
        if path.exists():
            data = read_json_object(path)
            keys = ("separator", "step_tag_id", "good_token_id", "bad_token_id", "positive_label")
            found = {key: data[key] for key in keys if data.get(key) is not None}
            if found:
                return found
    return {}


def _tag_id(tokenizer, separator: str, expected: int | None) -> int:
    """The token a step is read at: the separator's last one (one token of its own, or refused)."""
    ids = tokenizer.encode(separator, add_special_tokens=False)
    if not ids:
        raise ModelFormatError(f"separator {separator!r} encodes to no tokens")
    if expected is not None and ids[-1] != expected:
        raise ModelFormatError(
            f"separator {separator!r} ends in token {ids[-1]}, but the folder's step_tag_id is {expected}: "
            "pass the separator that ends in that token (--separator)"
        )
    tag = separator.strip()
    # A tag like <extra_0> must be one token, or the read position would be the tag's last fragment.
    if tag.startswith("<") and len(tokenizer.encode(tag, add_special_tokens=False)) != 1:
        raise ModelFormatError(f"the tokenizer has no {tag!r} token: not a folder of this style")
    return ids[-1]


def _label_id(tokenizer, text: str | None, found: int | None, default: str, what: str) -> int:
    if text is None and found is not None:
        return int(found)
    text = text if text is not None else default
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:  # a sentencepiece prefix ('▁', '+'): the bare token, if the vocabulary has it
        bare = tokenizer.convert_tokens_to_ids(text)
        ids = [bare] if isinstance(bare, int) and bare != tokenizer.unk_token_id else ids
    if len(ids) != 1:
        raise ModelFormatError(f"--{what}-token {text!r} is {len(ids)} tokens here; it must be exactly one")
    return ids[0]
