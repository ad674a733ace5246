"""The README.md model card of an exported checkpoint: how to read it, what it was trained on,
how it scored, and how to serve it. Plain text from facts; no torch, no Django."""
from __future__ import annotations

import json
from pathlib import Path

CARD_NAME = "README.md"


def write_model_card(folder: Path, exported, *, head_type: str, layer: int | None, facts: dict) -> Path:
    config = exported.config
    if getattr(exported, "serve_as", "transformers") == "vllm":
        return _write(folder, [
            _front_matter("vllm"),
            f"# {facts.get('name', 'Stepwise PRM')}\n\nA process reward model trained in Stepwise and exported in "
            f"the form vLLM serves as one (`{VLLM_ARCHITECTURE}`, as Qwen2.5-Math-PRM).",
            _vllm_reading(config),
            _construction(exported.construction, head_type, layer),
            _training(facts),
            _evaluation(facts),
        ])
    sections = [
        _front_matter(exported.kind),
        f"# {facts.get('name', 'Stepwise PRM')}\n\nA process reward model trained in Stepwise and exported as a "
        f"standard transformers checkpoint (`{_auto_class(exported.kind)}`, no custom code).",
        _reading(config, exported.kind),
        _construction(exported.construction, head_type, layer),
        _training(facts),
        _evaluation(facts),
        _serving(exported.kind),
        "## Back into Stepwise\n\n`stepwise.json` describes this folder as a Stepwise model of kind "
        f"`{exported.kind}`: `./stepwise manage register_model {folder.name if folder.name else 'FOLDER'} "
        f"--style {exported.kind}` registers it as a version.",
    ]
    return _write(folder, sections)


def _write(folder: Path, sections: list[str]) -> Path:
    path = Path(folder) / CARD_NAME
    path.write_text("\n\n".join(sections) + "\n")
    return path


def _auto_class(kind: str) -> str:
    return "AutoModelForCausalLM" if kind == "step_token" else "AutoModelForTokenClassification"


def _front_matter(kind: str) -> str:
    tag = {"step_token": "text-generation", "vllm": "token-classification"}.get(kind, "token-classification")
    return f"---\nlibrary_name: transformers\npipeline_tag: {tag}\ntags:\n- process-reward-model\n- stepwise\n---"


def _reading(config: dict, kind: str) -> str:
    separator = json.dumps(config["separator"])
    lines = [
        "## How to read it",
        "",
        f"Input: the problem, then `\\n\\n`, then each step followed by the step marker {separator}, tokenized "
        "as one text with the tokenizer's defaults. A step's score is read at each occurrence of the marker, "
        f"id **{config['step_tag_id']}** (vLLM's `step_tag_id`): one special token, so it appears exactly once "
        "per step whatever the text around it.",
        "",
    ]
    if kind == "step_token":
        lines.append(
            f"P(step is good) = softmax(logits[:, [{config['good_token_id']}, {config['bad_token_id']}]])[..., 0] "
            f"(good token id {config['good_token_id']}, bad token id {config['bad_token_id']}, as Math-Shepherd reads "
            "`+`/`-`). Only those two rows of the lm_head are set: this model is a scorer, not a generator."
        )
    else:
        lines.append("Labels: 0 = bad, 1 = good; P(step is good) = softmax(logits)[..., 1] at the step positions.")
    lines += ["", "With transformers alone (prints one P(good) per step):", "", "```python", card_snippet(config, kind),
              "```"]
    return "\n".join(lines)


EXAMPLE_PROBLEM = "What is 12 + 7?"
EXAMPLE_STEPS = ["First add the ones: 2 + 7 = 9.", "Then the tens: 10.", "So 12 + 7 = 19."]


def card_snippet(config: dict, kind: str) -> str:
    """Python that loads this folder with transformers and prints each example step's P(good).

    It reads as Stepwise reads (the text, tag and read-out of `scoring.core.prm`) under Stepwise's
    precision rule (float32 on a CPU, bf16 on CUDA); a test runs it against Stepwise's scores."""
    if kind == "step_token":
        auto = "AutoModelForCausalLM"
        read = f"logits[:, [{config['good_token_id']}, {config['bad_token_id']}]].softmax(-1)[:, 0]"
    else:
        auto = "AutoModelForTokenClassification"
        read = f"logits.softmax(-1)[:, {int(config.get('positive_label', 1))}]"
    return f"""import json

import torch
from transformers import {auto}, AutoTokenizer

folder = "."  # this model's folder
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32  # float32 everywhere reproduces Stepwise exactly
tokenizer = AutoTokenizer.from_pretrained(folder)
model = {auto}.from_pretrained(folder, dtype=dtype).to(device).eval()

problem = {json.dumps(EXAMPLE_PROBLEM)}
steps = {json.dumps(EXAMPLE_STEPS)}
text = problem.strip() + "\\n\\n" + "".join(step.strip() + {json.dumps(config["separator"])} for step in steps)
ids = tokenizer(text, return_tensors="pt").input_ids.to(device)
with torch.no_grad():
    logits = model(input_ids=ids).logits[0][ids[0] == {config["step_tag_id"]}].float()
print(json.dumps({read}.tolist()))"""


def _construction(construction: str, head_type: str, layer: int | None) -> str:
    where = "the final-normed last layer" if layer is None else f"hidden state {layer}"
    text = f"## How it was built\n\nStepwise's {head_type} head reads {where}."
    if head_type == "beta":
        text += " It is distributional (a mean and a reliability per step); this export carries its mean only."
    if construction == "linearized":
        text += (
            " The checkpoint keeps the layers below the read-out, widens the residual stream by the dimensions "
            "the construction needs and appends layers whose attention bias writes a constant 2^20 there, so that "
            "the final RMSNorm is linear and the classifier reproduces the head exactly."
        )
    text += (
        " Serve it in float32 for Stepwise's scores: in bfloat16, rounding in the backbone moved a SmolLM2 "
        "head's P(good) by up to ~0.1 (the original's as much as the export's); never float16, which cannot "
        "hold 2^20."
    )
    return text


def _training(facts: dict) -> str:
    data = facts.get("data") or {}
    lines = ["## Training data", ""]
    for split in ("train", "val"):
        part = data.get(split)
        if part:
            lines.append(
                f"- {split}: {part.get('solutions')} solutions of {part.get('problems')} problems, "
                f"{part.get('labeled_steps')} labeled steps ({part.get('labels')} labels, "
                f"positive rate {_fmt(part.get('positive_rate'))})"
            )
    if facts.get("generations"):
        lines.append(f"- labels from queue generations {', '.join(str(g) for g in facts['generations'])}")
    if facts.get("n_labels") is not None:
        lines.append(f"- {facts['n_labels']} trainable annotations when the training run started")
    if len(lines) == 2:
        lines.append("No training record (an untrained or imported head).")
    return "\n".join(lines)


def _evaluation(facts: dict) -> str:
    metrics = facts.get("metrics") or {}
    if not metrics:
        return "## Evaluation\n\nNo evaluation recorded for this version."
    rows = [f"| {key} | {_fmt(value)} |" for key, value in _flatten(metrics)]
    table = "| metric | value |\n|---|---|\n" + "\n".join(rows)
    return "## Evaluation\n\nAs recorded by Stepwise for this version.\n\n" + table


def _serving(kind: str) -> str:
    return (
        "## Serving with vLLM\n\nvLLM does not serve this form as a process reward model: "
        + ("its pooling runner drops a causal LM's lm_head, so the `+`/`-` rows above are never read. "
           if kind == "step_token" else "its token classification is for registered encoder models. ")
        + "Export the version with `--as token_classification --serve-as vllm` for the form it serves."
    )


# The vLLM version whose code the vLLM form and `bench.pooling_server` follow (see that module).
VLLM_VERSION = "vllm-project/vllm@055e47c"
VLLM_ARCHITECTURE = "Qwen2ForProcessRewardModel"


def vllm_pooler_config(config: dict) -> dict:
    """The --pooler-config this export is served with: STEP pooling at the step tag, nothing else."""
    return {"pooling_type": "STEP", "step_tag_id": config["step_tag_id"]}


def vllm_serve_command(config: dict, *, folder: str = "./this-folder", name: str = "stepwise-prm") -> str:
    """The one `vllm serve` line for the vLLM form (float32: see "How it was built")."""
    return (f"vllm serve {folder} --tokenizer {folder}/tokenizer --runner pooling --dtype float32 \\\n"
            f"  --served-model-name {name} --pooler-config '{json.dumps(vllm_pooler_config(config))}'")


def vllm_request(config: dict, *, name: str = "stepwise-prm") -> dict:
    text = EXAMPLE_PROBLEM + "\n\n" + "".join(step + config["separator"] for step in EXAMPLE_STEPS)
    return {"model": name, "input": [text], "task": "token_classify", "encoding_format": "float"}


def _vllm_reading(config: dict) -> str:
    separator = json.dumps(config["separator"])
    return "\n".join([
        "## Serving it with vLLM",
        "",
        f"Follows vLLM's code at {VLLM_VERSION} (`{VLLM_ARCHITECTURE}` in `vllm/model_executor/models/qwen2_rm.py`,"
        " STEP pooling in `vllm/model_executor/layers/pooler/tokwise/methods.py`):",
        "",
        f"```bash\n{vllm_serve_command(config)}\n```",
        "",
        "```bash\ncurl -s localhost:8000/pooling -H 'Content-Type: application/json' -d '"
        + json.dumps(vllm_request(config)) + "'\n```",
        "",
        f"Input: the problem, then `\\n\\n`, then each step followed by the step marker {separator}, as one text. "
        f"The answer holds one row per occurrence of the marker (id **{config['step_tag_id']}**, the `step_tag_id`), "
        "each row `[P(bad), P(good)]`: read entry 1 (`positive_index` 1 in Stepwise's remote config).",
        "",
        "With transformers alone: `AutoModel` loads the Qwen2 backbone (no custom code); the score MLP is the "
        "`score.0` / `score.2` tensors of `model.safetensors`: `softmax(score.2(relu(score.0(h))))[..., 1]` at "
        "the marker positions, h the backbone's last hidden state.",
    ])


def _flatten(metrics: dict, prefix: str = ""):
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, name + ".")
        elif isinstance(value, int | float | str) or value is None:
            yield name, value


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
