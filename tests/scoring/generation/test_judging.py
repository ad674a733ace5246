"""The judge's prompt and the reading of its answers (scoring.generation.judging): plain Python, no database."""
import math

import pytest

from scoring.generation import judging
from scoring.generation.generators import Sample, TokenLogprob
from scoring.generation.judging import Judged, Unparseable
from steps import verification

ANSWER = """The student adds 2 and 3 correctly.
Step 1: correct

5 times 2 is 10, not 12.
Step 2: incorrect
"""


def answer(text: str, *, finish_reason: str = "stop", logprobs=None) -> Sample:
    return Sample(text=text, prompt_tokens=10, completion_tokens=20, finish_reason=finish_reason, logprobs=logprobs)


def test_the_default_prompt_numbers_the_steps_and_asks_for_a_verdict_line_per_step():
    prompt = verification.render_prompt(verification.DEFAULT_TEMPLATE, problem=" What is (2+3)*2? ",
                                        steps=["2 + 3 = 5", "5 * 2 = 12\n"])
    assert "Problem:\nWhat is (2+3)*2?\n" in prompt
    assert "Step 1: 2 + 3 = 5\n\nStep 2: 5 * 2 = 12\n" in prompt
    assert "Verify the solution step by step" in prompt and "Step N: incorrect" in prompt


def test_a_template_without_problem_or_steps_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"must contain \{steps\}"):
        verification.check_template("Judge {problem}")
    with pytest.raises(ValueError, match=r"\{problem\} and \{steps\}"):
        verification.check_template("Judge this")


def test_the_prompt_version_changes_with_the_template_text_only():
    version = judging.prompt_version(verification.DEFAULT_TEMPLATE)
    assert len(version) == 12 and version == judging.prompt_version(verification.DEFAULT_TEMPLATE)
    assert version != judging.prompt_version(verification.DEFAULT_TEMPLATE + " ")


def test_verdicts_stop_at_the_first_incorrect_step_with_the_critique_before_each():
    judged = judging.read_answer(answer(ANSWER), n_steps=4)
    assert isinstance(judged, Judged)
    assert [(v.good, v.p_good) for v in judged.verdicts] == [(True, 1.0), (False, 0.0)]
    assert [v.critique for v in judged.verdicts] == ["The student adds 2 and 3 correctly.", "5 times 2 is 10, not 12."]


def test_verdicts_after_the_first_error_are_left_out():
    text = ANSWER + "Then it goes on.\nStep 3: correct\n"
    judged = judging.read_answer(answer(text), n_steps=3)
    assert isinstance(judged, Judged) and len(judged.verdicts) == 2


@pytest.mark.parametrize("line", ["**Step 1: correct**", "Step 1: Correct.", "- step 1 - correct",
                                  "### Step 1: CORRECT"])
def test_a_verdict_line_may_carry_markdown_emphasis_and_punctuation(line):
    judged = judging.read_answer(answer(f"Fine.\n{line}\n"), n_steps=1)
    assert isinstance(judged, Judged) and judged.verdicts[0].good


def test_windows_line_ends_are_read_like_any_other():
    judged = judging.read_answer(answer(ANSWER.replace("\n", "\r\n")), n_steps=2)
    assert isinstance(judged, Judged) and [v.good for v in judged.verdicts] == [True, False]


@pytest.mark.parametrize(("text", "finish", "n_steps", "reason"), [
    ("The solution looks fine to me.", "stop", 2, "no verdicts"),
    ("Schritt 1: richtig\nSchritt 2: falsch", "stop", 2, "no verdicts"),
    ("Step 1 is correct and step 2 is correct.", "stop", 2, "no verdicts"),
    ("ok\nStep 1: correct\nok\nStep 1: correct\n", "stop", 2, "out of order or repeated"),
    ("ok\nStep 2: correct\nok\nStep 1: correct\n", "stop", 2, "out of order or repeated"),
    ("ok\nStep 1: correct\n", "stop", 2, "incomplete: verdicts stop at step 1 of 2"),
    ("ok\nStep 1: correct\nok\nStep 2: correct\nStep 3: correct", "stop", 2, "the solution has 2 steps"),
    ("ok\nStep 1: correct\nok\nStep 2: correct\n", "length", 2, "truncated"),
    ("x" * (judging.MAX_ANSWER_CHARS + 1) + "\nStep 1: correct", "stop", 1, "too long"),
])
def test_an_answer_that_cannot_be_read_is_unparseable_with_its_reason_never_guessed(text, finish, n_steps, reason):
    outcome = judging.read_answer(answer(text, finish_reason=finish), n_steps=n_steps)
    assert isinstance(outcome, Unparseable) and reason in outcome.reason


def tokens_of(text: str, verdict_alternatives: dict[str, float]) -> tuple[TokenLogprob, ...]:
    """`text` as one token per word and space, the verdict word's token with the given alternatives."""
    pieces = [piece for piece in text.replace(" ", "\0 \0").replace("\n", "\0\n\0").split("\0") if piece]
    verdict = next(i for i, piece in enumerate(pieces) if piece in ("correct", "incorrect"))
    return tuple(TokenLogprob(piece, -0.1, tuple(verdict_alternatives.items()) if i == verdict else ())
                 for i, piece in enumerate(pieces))


def test_the_verdicts_probability_is_a_softmax_over_the_correct_and_incorrect_alternatives():
    text = "Looks right.\nStep 1: correct\n"
    alternatives = {"correct": math.log(0.6), " incorrect": math.log(0.2), "fine": math.log(0.1)}
    judged = judging.read_answer(answer(text, logprobs=tokens_of(text, alternatives)), n_steps=1)
    assert isinstance(judged, Judged) and judged.verdicts[0].p_good == pytest.approx(0.75)


def test_a_probability_on_the_other_side_of_the_written_verdict_gives_way_to_the_verdict():
    text = "Looks right.\nStep 1: correct\n"
    alternatives = {"correct": math.log(0.3), " incorrect": math.log(0.6)}  # sampled against the odds
    judged = judging.read_answer(answer(text, logprobs=tokens_of(text, alternatives)), n_steps=1)
    assert isinstance(judged, Judged) and judged.verdicts[0].p_good == 1.0


def test_a_verdict_split_into_in_and_correct_reads_the_in_as_incorrect():
    text = "Wrong sum.\nStep 1: incorrect\n"
    split = (("in", math.log(0.9)), ("correct", math.log(0.1)))
    tokens = [TokenLogprob(piece, -0.1, split if piece == "in" else ())
              for piece in ("Wrong sum.", "\n", "Step", " 1", ":", " ", "in", "correct", "\n")]
    judged = judging.read_answer(answer(text, logprobs=tuple(tokens)), n_steps=1)
    assert isinstance(judged, Judged) and judged.verdicts[0].p_good == pytest.approx(0.1)


def test_without_logprobs_or_with_tokens_that_do_not_spell_the_text_the_verdict_is_one_or_zero():
    text = "Wrong.\nStep 1: incorrect\n"
    mismatched = (TokenLogprob("something else", -0.1, (("correct", -0.1),)),)
    for logprobs in (None, mismatched):
        judged = judging.read_answer(answer(text, logprobs=logprobs), n_steps=1)
        assert isinstance(judged, Judged) and judged.verdicts[0].p_good == 0.0
