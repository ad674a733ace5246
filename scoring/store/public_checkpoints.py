"""Public PRM checkpoint folders described as Stepwise models (their stepwise.json).

- `math_shepherd`: a causal LM fed its model card's input (`input_format` "math_shepherd",
  scoring.core.encoding: `f"{question} {output}"`, each step closed by " ки"), P(good) = softmax
  over the `+` / `-` token logits (the card's `encode("+ -")`) wherever `ки` is (kind step_token).
- `qwen_prm`: Qwen2.5-Math-PRM's input (`input_format` "qwen_prm": the chat template over its
  system prompt, the question and the steps each closed by `<extra_0>`), softmax(...)[1] of a
  2-label token classifier at each `<extra_0>` (kind token_classification). The real checkpoint's
  `Qwen2ForProcessRewardModel` is defined in scoring.core.prm, so it loads without remote code;
  a folder of a stock *ForTokenClassification architecture loads as that.
- `token_classification` / `step_token`: Stepwise's own exports (and any such model), read at
  a separator you name in Stepwise's own input.

Before a folder is accepted, its config is read and its model built with shapes only, as scoring
will load it (`check_buildable`): a class transformers cannot build, or weights the checkpoint
lacks, are refused here rather than at the first rescore. Ids come, in order, from the options
given, from the folder's own stepwise.json or config.json (`step_tag_id`, `good_token_id`,
`bad_token_id`), then from the tokenizer. No Django.
"""
from __future__ import annotations

from pathlib import Path

from scoring.core import encoding, step_marker
from scoring.core.model_files import (
    CONFIG_NAME,
    ModelFormatError,
    check_safetensors_only,
    read_json_object,
    validate_config,
)

STYLES = {
    "math_shepherd": {"kind": "step_token", "separator": " ки", "good": "+", "bad": "-",
                      "input_format": "math_shepherd"},
    "qwen_prm": {"kind": "token_classification", "separator": "<extra_0>", "input_format": "qwen_prm"},
    "token_classification": {"kind": "token_classification", "separator": "\n\n"},
    "step_token": {"kind": "step_token", "separator": " ки", "good": "+", "bad": "-"},
}


def describe_checkpoint(
    folder: str | Path, *, style: str, separator: str | None = None,
    good_token: str | None = None, bad_token: str | None = None, trust_remote_code: bool = False,
) -> dict:
    """The stepwise.json for a public checkpoint folder, checked against its tokenizer and its weights."""
    from scoring.core import model_loading  # torch, transformers: the web process never loads them

    if style not in STYLES:
        raise ModelFormatError(f"--style must be one of {', '.join(STYLES)}, not {style!r}")
    folder = Path(folder).resolve()
    check_safetensors_only(folder)
    defaults, found = STYLES[style], _ids_in_folder(folder)
    _check_architecture(folder, defaults["kind"], style)
    check_buildable(folder, defaults["kind"], trust_remote_code=trust_remote_code)
    tokenizer = model_loading.load_tokenizer(folder)
    input_format = defaults.get("input_format", "stepwise")
    if input_format != "stepwise" and separator is not None:
        raise ModelFormatError(f"--separator: a {style} checkpoint reads its model card's input, which has its own tag")
    separator = separator or found.get("separator") or defaults["separator"]
    config = {"kind": defaults["kind"], "backbone": ".", "separator": separator, "input_format": input_format,
              "step_tag_id": _step_tag_id(tokenizer, separator, input_format, found.get("step_tag_id"))}
    if defaults["kind"] == "token_classification":
        config["positive_label"] = int(found.get("positive_label", 1))
    else:
        config["step_tag"] = encoding.FORMAT_TAGS.get(input_format, separator)
        labels_given = good_token is not None or bad_token is not None
        config |= _good_and_bad_ids(tokenizer, {} if labels_given else found,
                                    good=good_token or defaults["good"], bad=bad_token or defaults["bad"])
    validate_config(config, where=str(folder / CONFIG_NAME))
    _require_one_tag_per_step(tokenizer, separator, input_format, where=str(folder))
    return config


def _require_one_tag_per_step(tokenizer, separator: str, input_format: str, *, where: str) -> None:
    """Real texts, built as scoring builds them, must hold the step tag exactly once per step."""
    if input_format == "stepwise":
        step_marker.require_step_marker(tokenizer, separator, where=where)
        return
    try:
        encoding.encode_many(tokenizer, step_marker.boundary_texts(), input_format=input_format)
    except ModelFormatError as error:
        raise ModelFormatError(f"{where}: {error}") from None


ARCHITECTURE_SUFFIX = {"step_token": "ForCausalLM", "token_classification": "ForTokenClassification"}


def _check_architecture(folder: Path, kind: str, style: str) -> None:
    """A folder of the wrong class would load with a freshly initialised read-out (random scores)."""
    from scoring.core.prm import PROCESS_REWARD_ARCHITECTURES  # torch: check_buildable loads it next anyway

    config = read_json_object(folder / "config.json")
    own = read_json_object(folder / CONFIG_NAME).get("kind") if (folder / CONFIG_NAME).exists() else None
    if own is not None and own != kind:
        raise ModelFormatError(f"{folder / CONFIG_NAME} says kind {own!r}; --style {style} is kind {kind!r}")
    architectures = config.get("architectures") or []
    if kind == "token_classification" and any(a in PROCESS_REWARD_ARCHITECTURES for a in architectures):
        return  # defined in scoring.core.prm: no remote code
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
    # torch, transformers (and scoring.core.model_loading, which imports them): the web process never loads them.
    import torch

    from scoring.core.model_loading import backbone_class, build_model, load_config
    from scoring.core.process_reward import PROCESS_REWARD_ARCHITECTURES

    try:
        config = load_config(folder, trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = build_model(kind, config, trust_remote_code=trust_remote_code)
    except Exception as error:  # transformers raises many kinds here; each means "cannot build"
        architectures = read_json_object(folder / "config.json").get("architectures") or []
        process_reward = any(a in PROCESS_REWARD_ARCHITECTURES for a in architectures)
        name = "ProcessRewardModel" if process_reward else backbone_class(kind).__name__
        raise ModelFormatError(
            f"{folder}: transformers cannot build this model as {name}: {type(error).__name__}: {str(error)[:300]}"
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


def _step_tag_id(tokenizer, separator: str, input_format: str, expected: int | None) -> int:
    """The token a step is read at: the model card's tag, else the separator's last one (one token of its own)."""
    if input_format != "stepwise":
        tag_id = encoding.format_tag_id(tokenizer, input_format)
        if expected is not None and tag_id != expected:
            raise ModelFormatError(f"the folder's step_tag_id is {expected}, but its tokenizer's "
                                   f"{encoding.FORMAT_TAGS[input_format]!r} is {tag_id}")
        return tag_id
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
    return int(ids[-1])


def _good_and_bad_ids(tokenizer, found: dict, *, good: str, bad: str) -> dict[str, int]:
    """The label token ids: the folder's own (`found`), else those of the `good` and `bad` texts."""
    if found.get("good_token_id") is not None and found.get("bad_token_id") is not None:
        ids = (int(found["good_token_id"]), int(found["bad_token_id"]))
    else:
        ids = _label_ids(tokenizer, good, bad)
    if ids[0] == ids[1]:
        raise ModelFormatError(f"good and bad token are the same id {ids[0]}")
    return {"good_token_id": ids[0], "bad_token_id": ids[1]}


def _label_ids(tokenizer, good: str, bad: str) -> tuple[int, int]:
    """Math-Shepherd's card: `tokenizer.encode(f"{good} {bad}")[1:]` (its ids past the BOS), when
    that is two tokens; else each label alone, one token each."""
    pair = tokenizer.encode(f"{good} {bad}", add_special_tokens=False)
    if len(pair) == 2:
        return int(pair[0]), int(pair[1])
    return _label_id(tokenizer, good, "good"), _label_id(tokenizer, bad, "bad")


def _label_id(tokenizer, text: str, what: str) -> int:
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:  # a sentencepiece prefix ('▁', '+'): the bare token, if the vocabulary has it
        bare = tokenizer.convert_tokens_to_ids(text)
        ids = [bare] if isinstance(bare, int) and bare != tokenizer.unk_token_id else ids
    if len(ids) != 1:
        raise ModelFormatError(f"--{what}-token {text!r} is {len(ids)} tokens here; it must be exactly one")
    return int(ids[0])
