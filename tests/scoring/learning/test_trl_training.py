"""The TRL export trains with the installed trl (requirements-dev.txt pins 1.13), through the import
the README and the export's dataset card name: `from trl.experimental.prm import PRMConfig,
PRMTrainer`. trl 1.14 and later ship no PRM trainer (huggingface/trl#7133): the card says so."""
import json

import pytest
import torch
from django.core.management import call_command

from bench.tiny import build_tiny_tokenizer, tiny_llama_config
from tests.annotations import annotate
from tests.factories import SolutionFactory

STEPS = [["First add the ones: 2 + 7 = 9.", "Then the tens: 10.", "So 12 + 7 = 19."],
         ["Divide both sides by 3", "x = 5", "# Answer\n\n5"], ["We factor: $(x - 2)(x - 3)$", "\\boxed{2, 3}"]]
RATINGS = [[1, 1, 1], [1, -1], [1, 0]]


def exported_trl_rows(tmp_path) -> list[dict]:
    for steps, ratings in zip(STEPS, RATINGS, strict=True):
        annotate(SolutionFactory(steps=steps), ratings)
    out = tmp_path / "trl.jsonl"
    call_command("export_prm800k", str(out), "--format", "trl")
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.django_db
def test_the_trl_export_trains_one_step_of_trls_prm_trainer(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers import LlamaForTokenClassification
    from trl.experimental.prm import PRMConfig, PRMTrainer  # the import the README names for trl 1.13

    rows = exported_trl_rows(tmp_path)
    assert any(False in row["labels"] for row in rows) and any(all(row["labels"]) for row in rows)
    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(0)
    model = LlamaForTokenClassification(tiny_llama_config(tokenizer, num_labels=2))
    before = {name: value.clone() for name, value in model.named_parameters()}
    args = PRMConfig(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=len(rows),
                     learning_rate=1e-2, report_to=[], save_strategy="no", use_cpu=True, max_length=512,
                     logging_steps=1, dataloader_num_workers=0, dataset_num_proc=None)
    trainer = PRMTrainer(model=model, args=args, processing_class=tokenizer, train_dataset=Dataset.from_list(rows))
    result = trainer.train()
    assert trainer.state.global_step == 1 and torch.isfinite(torch.tensor(result.training_loss))
    changed = [name for name, value in model.named_parameters() if not torch.equal(value, before[name])]
    assert "score.weight" in changed and any(name.startswith("model.layers.") for name in changed)
