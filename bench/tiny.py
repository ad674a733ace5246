"""Tiny PRMs built in-process for tests, benchmarks and scripts: a small Llama and a tokenizer trained
in seconds. Nothing downloaded, nothing committed.

    backbone = build_tiny_backbone(tmp_path / "backbone")
    folder = build_tiny_prm(tmp_path / "prm", kind="head", head_type="beta")
    prm = load_prm(folder, device="cpu", dtype=torch.float32)
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from scoring.core.prm import DEFAULT_SEPARATOR, StepHead, save_head_model, write_model_config
from scoring.core.step_marker import STEP_MARKER

STEP_TAG = " ки\n"  # Math-Shepherd's step tag, appended after each step
CORPUS = [
    "What is 12 + 7? First add the ones: 2 + 7 = 9. Then the tens: 10. So 12 + 7 = 19.",
    "Let x be the number. Then 3x = 12, so x = 4. # Answer\n\n4",
    "The area of a circle of radius r is pi r^2; with r = 3 it is 9 pi.",
    "We factor x^2 - 5x + 6 = (x - 2)(x - 3), so the roots are 2 and 3.",
    "Step: multiply both sides by 2. Step: subtract 4. Step: divide by 3.",
    "The sum of the angles of a triangle is 180 degrees. + - ки",
    "Since 17 is prime, its only divisors are 1 and 17. \\frac{1}{2} \\sqrt{2}",
] * 4


def build_tiny_tokenizer(*, vocab_size: int = 400, step_marker: bool = False):
    """A byte-level BPE tokenizer (any text encodes) wrapped as a transformers fast tokenizer;
    `step_marker` adds Stepwise's step marker as a special token (scoring.core.step_marker)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    if step_marker:
        wrapped.add_special_tokens({"additional_special_tokens": [STEP_MARKER]})
    return wrapped


def tiny_llama_config(tokenizer, **overrides):
    from transformers import LlamaConfig

    fields = {
        "vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
        "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id, "tie_word_embeddings": False,
    }
    fields.update(overrides)
    return LlamaConfig(**fields)


def build_tiny_backbone(
    folder: str | Path, *, seed: int = 0, token_classification: bool = False, step_marker: bool = False, **config
) -> Path:
    """A seeded tiny Llama (causal LM, or 2-label token classifier) saved as safetensors."""
    from transformers import LlamaForCausalLM, LlamaForTokenClassification

    folder = Path(folder)
    tokenizer = build_tiny_tokenizer(step_marker=step_marker)
    torch.manual_seed(seed)
    if token_classification:
        model = LlamaForTokenClassification(tiny_llama_config(tokenizer, num_labels=2, **config))
    else:
        model = LlamaForCausalLM(tiny_llama_config(tokenizer, **config))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_prm(
    folder: str | Path, *, kind: str = "head", head_type: str = "point", layer: int | None = None,
    seed: int = 0, backbone: str | Path | None = None, step_marker: bool = False,
) -> Path:
    """A complete model folder of the given kind, with its tiny backbone inside it ("." ).

    `step_marker`: the tokenizer gets Stepwise's step marker and a head or token-classification
    model uses it as its separator (what export and registration require)."""
    folder = Path(folder)
    separator = STEP_MARKER if step_marker else DEFAULT_SEPARATOR
    if backbone is None:
        build_tiny_backbone(folder, seed=seed, token_classification=kind == "token_classification",
                            step_marker=step_marker)
        backbone_ref = "."
    else:
        folder.mkdir(parents=True, exist_ok=True)
        backbone_ref = str(Path(backbone).resolve())
    if kind == "head":
        torch.manual_seed(seed + 1)
        hidden = json.loads((folder / backbone_ref / "config.json").read_text())["hidden_size"]
        head = StepHead(hidden, head_type)
        # A random linear head gives p near 0.5 everywhere; scale it so scores spread out.
        with torch.no_grad():
            head.mu.weight.mul_(8.0)
        save_head_model(folder, head=head, backbone=backbone_ref, layer=layer, separator=separator)
    elif kind == "step_token":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder / backbone_ref)
        good, bad = (tokenizer(t, add_special_tokens=False)["input_ids"][-1] for t in ("+", "-"))
        write_model_config(folder, {"kind": "step_token", "backbone": backbone_ref, "separator": STEP_TAG,
                                    "step_tag": STEP_TAG, "good_token_id": good, "bad_token_id": bad})
    else:
        write_model_config(folder, {"kind": "token_classification", "backbone": backbone_ref,
                                    "separator": separator, "positive_label": 1})
    return folder


def build_tiny_generator(folder: str | Path, *, seed: int = 0, ends_at_once: bool = False) -> Path:
    """A tiny causal LM for `LocalGenerator`: random text, or (`ends_at_once`) none at all.

    `ends_at_once` biases end-of-text by +100 in the folder's generation config, so every
    completion is empty and a rollout's answer is whatever its prefix already states: rollout
    counts become predictable from the steps alone.
    """
    from transformers import AutoTokenizer, GenerationConfig

    folder = build_tiny_backbone(folder, seed=seed)
    if ends_at_once:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        eos = tokenizer.eos_token_id
        GenerationConfig(sequence_bias=[[[eos], 100.0]], eos_token_id=eos,
                         pad_token_id=tokenizer.pad_token_id).save_pretrained(folder)
    return folder
