"""The step splitter: lead-ins keep their equations, math blocks are never cut, modes per import."""
import json
import re
from io import StringIO

import pytest

import bench
from steps import scanning
from steps.answers import extract_answer
from steps.splitting import (
    SPLIT_MODES,
    check_mode,
    is_lead_in,
    is_lone_equation,
    split_steps,
)
from tests.conftest import TEST_DATA

TEXT_MODES = [mode for mode in SPLIT_MODES if mode != "explicit"]

# Written as Qwen2.5-Math writes: single newlines, a lead-in ending in ":", multi-line \[ \].
QWEN_STYLE = (
    "First, we find the total cost of the beads. Now, we can multiply these values together:\n"
    "\\[\n"
    "3 \\times 4 = 12\n"
    "\\]\n"
    "The circumference is given by\n"
    "\\[\n"
    "C = 2\\pi r\n"
    "\\]\n"
    "where \\(r\\) is the radius.\n"
    "Therefore, the answer is \\(\\boxed{12}\\)."
)


def _jsonl(relative: str) -> list[dict]:
    with open(TEST_DATA / relative) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def real_responses() -> list[str]:
    return [response for line in _jsonl("model-responses/math_qwen25_cot_20x8.jsonl") for response in line["response"]]


def math500_solutions() -> list[str]:
    return [line["answer"] for line in _jsonl("math500/test.jsonl")]


def gsm8k_answers() -> list[str]:
    return [line["answer"] for line in _jsonl("gsm8k/test.jsonl")]


def _offsets(text: str, steps: list[str]) -> list[tuple[int, int]]:
    """Where each step lies in `text`: steps are cut from it in order, never rewritten."""
    spans, position = [], 0
    for step in steps:
        start = text.index(step, position)
        spans.append((start, start + len(step)))
        position = start + len(step)
    return spans


def _non_whitespace(text: str) -> str:
    return re.sub(r"\s", "", text)


def test_a_lead_in_keeps_the_display_equation_it_introduces():
    steps = split_steps(QWEN_STYLE, "line")
    assert steps[0] == ("First, we find the total cost of the beads. Now, we can multiply these values together:\n"
                        "\\[\n3 \\times 4 = 12\n\\]")
    assert not any(is_lead_in(step) for step in steps[:-1])


def test_an_equation_finishing_a_sentence_and_the_where_after_it_stay_with_the_sentence():
    steps = split_steps(QWEN_STYLE, "line")
    assert steps[1] == "The circumference is given by\n\\[\nC = 2\\pi r\n\\]\nwhere \\(r\\) is the radius."
    assert steps[2] == "Therefore, the answer is \\(\\boxed{12}\\)."
    assert len(steps) == 3


def test_a_blank_line_between_a_lead_in_and_its_equation_does_not_separate_them():
    text = "Subtracting 9 from both sides, we get:\n\n\\[\nb^2 = 16\n\\]\n\nSo \\(b = 4\\)."
    assert split_steps(text) == ["Subtracting 9 from both sides, we get:\n\n\\[\nb^2 = 16\n\\]", "So \\(b = 4\\)."]


def test_a_bold_list_heading_ending_in_a_colon_is_a_lead_in_too():
    text = "1. **Identify all possible outcomes:**\nEach die has 6 faces.\n2. **Count them.**"
    assert split_steps(text, "line") == ["1. **Identify all possible outcomes:**\nEach die has 6 faces.",
                                         "2. **Count them.**"]


@pytest.mark.parametrize("mode", TEXT_MODES)
@pytest.mark.parametrize("block", [
    "\\begin{align*}\nx &= 1 \\\\[2pt]\n\ny &= 2\n\\end{align*}",
    "$$\na + b\n\n= c\n$$",
    "\\[\n\\begin{cases} 1 & x > 0 \\\\\n0 & \\text{else. Then} \\end{cases}\n\\]",
    "```python\nprint(1)\n\nprint(2)\n```",
    "[asy]\ndraw((0,0)--(1,1));\n\ndot((0,0));\n[/asy]",
])
def test_no_mode_cuts_inside_a_math_or_code_block(mode, block):
    text = f"We compute it. Here it is\n{block}\nSo we are done. Next we check it."
    [containing] = [step for step in split_steps(text, mode) if block in step]
    assert containing.startswith("We compute it.") or containing.startswith("Here it is")


def test_auto_splits_paragraphs_when_the_text_has_blank_lines_and_lines_otherwise():
    assert split_steps("First line\nstill first.\n\nSecond.") == ["First line\nstill first.", "Second."]
    assert split_steps("First line.\nSecond line.") == ["First line.", "Second line."]
    # A blank line inside a math block is not a paragraph break.
    assert split_steps("We have\n$$\na\n\nb\n$$\nThen c.\nSo d.") == ["We have\n$$\na\n\nb\n$$", "Then c.", "So d."]


def test_sentence_mode_cuts_after_sentences_but_not_inside_math_numbers_or_abbreviations():
    text = ("We have $r = 3.$  Also, e.g. Dr. Smith says 3.5 is $x. Y$ here. The sum is 5. "
            "Then \\begin{align*}\na &= b.\n\\end{align*} Now, distribute again.\n2. Count them.")
    assert split_steps(text, "sentence") == [
        "We have $r = 3.$", "Also, e.g. Dr. Smith says 3.5 is $x. Y$ here.", "The sum is 5.",
        "Then \\begin{align*}\na &= b.\n\\end{align*}", "Now, distribute again.", "2. Count them.",
    ]


@pytest.mark.parametrize("mode", TEXT_MODES)
def test_the_prm800k_answer_block_is_a_step_of_its_own_in_every_mode_as_in_prm800k(mode):
    steps = ["I factor both numbers.", "So the greatest common factor is $320,\\!000$.", "# Answer\n\n320,000"]
    assert split_steps("\n\n".join(steps), mode) == steps
    assert split_steps("2 + 3 = 5.\n\n# Answer\n\n5", mode) == ["2 + 3 = 5.", "# Answer\n\n5"]
    assert split_steps("# Answer\n\n7", mode) == ["# Answer\n\n7"]
    # Whatever follows the answer stays in its step; a lead-in before it does not swallow it.
    assert split_steps("The answer:\n\n# Answer\n\nSeven\n\nDone.", mode) == [
        "The answer:", "# Answer\n\nSeven\n\nDone."]


def test_gsm8k_keeps_one_step_per_line_and_its_final_answer_line():
    text = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nShe sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
    assert split_steps(text) == text.split("\n")
    # A line that is only a calculation finishes the line before it.
    assert split_steps("She sold some clips\n48+24 = <<48+24=72>>72\n#### 72") == [
        "She sold some clips\n48+24 = <<48+24=72>>72", "#### 72"]


def test_the_boxed_final_answer_is_still_found_in_the_split_steps():
    for mode in TEXT_MODES:
        assert extract_answer("\n\n".join(split_steps(QWEN_STYLE, mode))) == "12"


def test_an_unclosed_block_from_a_truncated_generation_is_plain_text():
    assert scanning.spans("We get\n\\[\nx = 1 + 2 +") == []
    assert split_steps("We get\n\\[\nx = 1 + 2 +", "line") == ["We get\n\\[\nx = 1 + 2 +"]


def test_a_lone_equation_is_one_with_no_word_outside_its_math():
    assert is_lone_equation("\\[ b^2 = 16 \\]")
    assert is_lone_equation("6 \\times 6 = 36")
    assert is_lone_equation("16-3-4 = <<16-3-4=9>>9")
    assert not is_lone_equation("So \\(b = 4\\).")
    assert not is_lone_equation("#### 72")


def test_modes_are_checked_and_the_old_names_still_work():
    assert check_mode("blank") == "blank_line" and check_mode("lines") == "line"
    assert split_steps("One.\nTwo.\n\nThree.", "lines") == ["One.", "Two.", "Three."]
    assert split_steps("One.\nTwo.\n\nThree.", "blank") == ["One.\nTwo.", "Three."]
    with pytest.raises(ValueError, match="unknown split mode"):
        split_steps("a", "words")
    with pytest.raises(ValueError, match="explicit"):
        split_steps("a", "explicit")


def test_without_merging_the_pieces_are_the_plain_cuts():
    assert split_steps(QWEN_STYLE, "line", merge=False)[:2] == [
        "First, we find the total cost of the beads. Now, we can multiply these values together:",
        "\\[\n3 \\times 4 = 12\n\\]",
    ]


CORPORA = {"qwen25_math_responses": real_responses, "math500_references": math500_solutions,
           "gsm8k_test_answers": gsm8k_answers}


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("mode", TEXT_MODES)
def test_on_real_text_no_step_but_the_last_ends_with_a_colon(corpus, mode):
    for text in CORPORA[corpus]():
        steps = split_steps(text, mode)
        assert not [step for step in steps[:-1] if is_lead_in(step)], text


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("mode", TEXT_MODES)
def test_on_real_text_no_math_block_is_split(corpus, mode):
    for text in CORPORA[corpus]():
        spans = _offsets(text, split_steps(text, mode))
        for block in scanning.spans(text):
            assert any(start <= block.start and block.end <= end for start, end in spans), text[block.start:block.end]


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("mode", TEXT_MODES)
def test_on_real_text_splitting_then_joining_keeps_every_non_whitespace_character(corpus, mode):
    for text in CORPORA[corpus]():
        assert _non_whitespace("".join(split_steps(text, mode))) == _non_whitespace(text)


@pytest.mark.parametrize("mode", TEXT_MODES)
def test_on_real_responses_no_step_after_the_first_is_a_lone_equation(mode):
    for text in real_responses():
        assert not [step for step in split_steps(text, mode)[1:] if is_lone_equation(step)], text


def test_the_benchmark_prints_before_and_after_figures_for_each_corpus():
    out = StringIO()
    bench.call("bench_splitting", "--data-dir", str(TEST_DATA), "--modes", "auto", stdout=out)
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in out.getvalue().splitlines()[1:]}
    assert set(rows) == {(corpus, splitter) for corpus in ("qwen25-math", "math500", "gsm8k")
                         for splitter in ("before", "auto")}
    solutions, _, lone, colon, cut, _ = rows[("qwen25-math", "before")]
    assert solutions == "160" and float(colon.rstrip("%")) > 10 and float(lone.rstrip("%")) > 10
    for corpus in ("qwen25-math", "math500", "gsm8k"):
        _, _, lone, colon, cut, _ = rows[(corpus, "auto")]
        assert (lone, colon, cut) == ("0.0%", "0.0%", "0")
