"""TRL's readers of PRM data for tests: its PRM800K converter restated (an example script, not in
the wheel), its trainer's tokenizer itself (trl 1.13's `trl.experimental.prm`; later releases
ship no PRM trainer).

- `trl_converter_rows`: TRL's own PRM800K converter (trl 1.13, `examples/datasets/prm800k.py`):
  every completion of a step that was not continued gives a row (the path so far plus it,
  labeled `rating == 1`), the path goes on with the chosen or human completion (a human one is
  good), and the walked path is the last row.
- `tokenize_row`: `PRMTrainer.tokenize_row` on one stepwise row: the prompt's tokens labeled
  -100, then each step's tokens with the separator appended, labeled -100 but on the step's last
  token, which carries the step's label as 0 or 1.
"""
import os


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
    """`input_ids` and token `labels` of one stepwise row: trl's own `PRMTrainer.tokenize_row`."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.prm import PRMTrainer  # trl 1.13: the last release with a PRM trainer

    return PRMTrainer.tokenize_row(row, tokenizer, step_separator, max_length=None, max_completion_length=None,
                                   train_on_last_step_only=False, is_eval=False)


def supervised_labels(tokenized: dict[str, list[int]]) -> list[bool]:
    """The labels a PRM learns from a tokenized row, one per step, in order."""
    return [bool(label) for label in tokenized["labels"] if label != -100]
