"""OpenRLHF's reader of PRM data restated for tests (OpenRLHF does not install here).

`process_reward_item` is `ProcessRewardDataset.__getitem__` (openrlhf/datasets/process_reward_dataset.py,
commit cc827ce): tokenize `row[input_key]` without special tokens, read `row[label_key]` (a list: strings,
each one of `reward_tokens`, turned into token ids; or floats), cut the labels to the number of
placeholder tokens, and put them on the placeholders' positions of a tensor of -100. With
`convert_token_to_id` (openrlhf/datasets/utils.py): a token must encode to exactly one id.

One deviation, for float labels only: the label tensor takes the labels' dtype. OpenRLHF's loss reads
soft labels as floats (`PRMLoss`: `labels.dtype == torch.float`), but the published line builds it as
`torch.full_like(input_ids, -100)`, integers, which PyTorch refuses to fill with floats.
"""


def convert_token_to_id(token: str, tokenizer) -> int:
    ids = tokenizer.encode(token, add_special_tokens=False)
    assert len(ids) == 1, f"{token!r} is {len(ids)} tokens"
    return ids[0]


def process_reward_item(row: dict, tokenizer, *, input_key: str = "input", label_key: str = "label",
                        placeholder_token: str = "ки", reward_tokens=("+", "-"), max_length: int = 2048):
    """(input_ids, labels): labels -100 but at the placeholders, which carry the row's labels in order."""
    import torch

    placeholder_id = convert_token_to_id(placeholder_token, tokenizer)
    input_ids = tokenizer(row[input_key], max_length=max_length, padding=False, truncation=True,
                          return_tensors="pt", add_special_tokens=False)["input_ids"]
    values = row[label_key]
    assert isinstance(values, list), "labels should be a list of strings or numbers"
    if isinstance(values[0], str):
        for label in values:
            assert reward_tokens is None or label in reward_tokens, f"label should be in reward tokens, got {label}"
        label_tensor = torch.tensor([convert_token_to_id(v, tokenizer) for v in values], dtype=input_ids.dtype)
    else:
        label_tensor = torch.tensor(values, dtype=torch.float)
    mask = input_ids == placeholder_id
    truncated = label_tensor[..., : mask.sum(dim=-1).max()]
    labels = torch.full_like(input_ids, -100, dtype=label_tensor.dtype)  # the deviation: see above
    labels[mask] = truncated  # fewer labels than placeholders: PyTorch refuses
    return input_ids, labels
