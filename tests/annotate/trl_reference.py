"""TRL's readers of PRM data, restated for tests: trl is not a test dependency (its PRM trainer
lives in `trl.experimental.prm` up to trl 1.13, and later releases ship none).

- `trl_converter_rows`: TRL's own PRM800K converter (trl 1.13, `examples/datasets/prm800k.py`):
  every completion of a step that was not continued gives a row (the path so far plus it,
  labeled `rating == 1`), the path goes on with the chosen or human completion (a human one is
  good), and the walked path is the last row.
- `tokenize_row`: what `PRMTrainer.tokenize_row` makes of one stepwise row: the prompt's tokens
  (after BOS) labeled -100, then each step's tokens with the separator appended, labeled -100
  but on the step's last token, which carries the step's label as 0 or 1.
"""
from itertools import chain


def trl_converter_rows(line: dict) -> list[dict]:
    """What TRL's PRM800K converter makes of one line (empty rows left out, as the export does)."""
    prompt, texts, labels, out = line["question"]["problem"], [], [], []
    for step in line["label"]["steps"]:
        for i, completion in enumerate(step["completions"]):
            if i != step["chosen_completion"]:
                out.append({"prompt": prompt, "completions": [*texts, completion["text"]],
                            "labels": [*labels, completion["rating"] == 1]})
        if step["chosen_completion"] is not None:
            continued = step["completions"][step["chosen_completion"]]
            good = continued["rating"] == 1
        elif step["human_completion"] is not None:
            continued, good = step["human_completion"], True
        else:
            break
        texts, labels = [*texts, continued["text"]], [*labels, good]
    return [*out, {"prompt": prompt, "completions": texts, "labels": labels}] if texts else out


def tokenize_row(row: dict, tokenizer, step_separator: str = "\n") -> dict[str, list[int]]:
    """`input_ids` and token `labels` of one stepwise row, as PRMTrainer tokenizes it (no truncation)."""
    prompt_ids = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
    separator = tokenizer.encode(step_separator, add_special_tokens=False)
    steps = [tokenizer(text, add_special_tokens=False)["input_ids"] + separator for text in row["completions"]]
    step_labels = [[-100] * (len(ids) - 1) + [int(label)] for ids, label in zip(steps, row["labels"], strict=True)]
    if tokenizer.bos_token_id is not None:
        prompt_ids = [tokenizer.bos_token_id, *prompt_ids]
    return {"input_ids": prompt_ids + list(chain(*steps)),
            "labels": [-100] * len(prompt_ids) + list(chain(*step_labels))}


def supervised_labels(tokenized: dict[str, list[int]]) -> list[bool]:
    """The labels a PRM learns from a tokenized row, one per step, in order."""
    return [bool(label) for label in tokenized["labels"] if label != -100]
