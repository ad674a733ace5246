"""The OpenRLHF PRM export, read back as OpenRLHF's `ProcessRewardDataset` reads it (restated in
`openrlhf_reference`): each step closed by the placeholder, exactly one label per placeholder,
hard labels from `--reward_tokens + -`, soft ones as floats."""
import pytest

from annotate.models import AutoLabelRun, AutoStepLabel, Project
from annotate.pool import exporting
from annotate.pool.exporting import ExportOptions, ExportTally
from bench.tiny import build_tiny_tokenizer
from tests.annotate.pool.openrlhf_reference import convert_token_to_id, process_reward_item
from tests.annotations import annotate
from tests.factories import SolutionFactory

pytestmark = pytest.mark.django_db


def rows(tally: ExportTally | None = None, **options) -> list[dict]:
    return list(exporting.iter_rows(project=Project.objects.sole(), format="openrlhf", options=ExportOptions(**options),
                                    tally=tally))


@pytest.fixture(scope="module")
def tokenizer():
    """A tokenizer holding the placeholder as one token, as Mistral's (OpenRLHF's PRM example) does."""
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_tokens(["ки"])
    return tokenizer


def placed_labels(row: dict, tokenizer, label_key: str) -> list:
    """The labels OpenRLHF's dataset puts on the placeholders of the row, in order."""
    input_ids, labels = process_reward_item(row, tokenizer, label_key=label_key)
    placed = labels[input_ids == convert_token_to_id("ки", tokenizer)].tolist()
    assert (labels != -100).sum().item() == len(placed)
    return placed


def test_a_human_row_is_the_rated_steps_each_closed_by_the_placeholder(tokenizer):
    solution = SolutionFactory(steps=["a = 1.", "b = 2.", "a + b = 4.", "# Answer\n\n4"])
    annotate(solution, [1, 0, -1], labeler="x")
    (row,) = rows()
    assert row["input"] == f"{solution.problem.statement}\na = 1. ки\nb = 2. ки\na + b = 4. ки"
    assert (row["label"], row["value"], row["solution_id"]) == (["+", "+", "-"], [1.0, 1.0, 0.0], solution.id)
    assert rows(neutral_is_good=False)[0]["label"] == ["+", "-", "-"]
    plus, minus = convert_token_to_id("+", tokenizer), convert_token_to_id("-", tokenizer)
    assert placed_labels(row, tokenizer, "label") == [plus, plus, minus]
    assert placed_labels(row, tokenizer, "value") == [1.0, 1.0, 0.0]


def test_judge_rows_carry_the_judges_probability_as_soft_labels(tokenizer):
    solution = SolutionFactory(steps=["p", "q", "r"])
    run = AutoLabelRun.objects.create(method="judge", source="verifier-7b")
    for index, soft in ((0, 0.75), (1, 0.25)):
        AutoStepLabel.objects.create(run=run, step=solution.steps.get(index=index), soft=soft, critique="...")
    (row,) = rows(labels="judge")
    assert (row["label"], row["value"], row["label_source"]) == (["+", "-"], [0.75, 0.25], "judge")
    assert row["input"].count("ки") == 2  # the step the judge skipped is not in the row
    assert placed_labels(row, tokenizer, "value") == [0.75, 0.25]


def test_automatic_rows_carry_k_of_n_as_soft_labels(tokenizer):
    solution = SolutionFactory(steps=["p", "q"])
    run = AutoLabelRun.objects.create(method="math_shepherd", source="policy-7b")
    for index, k in ((0, 3), (1, 0)):
        AutoStepLabel.objects.create(run=run, step=solution.steps.get(index=index), n_rollouts=4, n_correct=k,
                                     soft=k / 4)
    (row,) = rows(labels="automatic")
    assert (row["label"], row["value"], row["label_source"]) == (["+", "-"], [0.75, 0.0], "automatic")
    assert placed_labels(row, tokenizer, "label") == [convert_token_to_id(t, tokenizer) for t in "+-"]


def test_a_text_holding_the_placeholder_is_left_out_and_counted():
    annotate(SolutionFactory(steps=["Шаг один ки.", "b"]), [1, 1], labeler="x")
    tally = ExportTally()
    assert rows(tally) == [] and tally.skipped["placeholder_in_text"] == 1
