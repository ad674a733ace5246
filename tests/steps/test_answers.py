"""Final-answer extraction, step splitting and calculator annotations."""
import pytest

from steps.answers import clean_answer, end_of_answer, extract_answer, last_boxed, strip_calculator_annotations

EXTRACTION_CASES = [
    # PRM800K: the text after a line "# Answer"
    ("So the greatest common factor is $2^9\\cdot 5^4 = 320,\\!000$.\n\n# Answer\n\n320,000", "320,000"),
    ("I get $x = 3$.\n\n# Answer\n\n\\frac{1}{2}", "\\frac{1}{2}"),
    # GSM8K: the last "#### N" line, calculator annotations earlier on
    ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", "72"),
    ("He makes $<<9*2=18>>18.\n#### 1,080", "1,080"),
    # the last \boxed{...}, nested braces, and \fbox
    ("First $\\boxed{1}$, then finally $\\boxed{\\frac{\\sqrt{3}}{2}}$.", "\\frac{\\sqrt{3}}{2}"),
    ("The set is $\\boxed{\\{1, 2\\}}$", "\\{1, 2\\}"),
    ("so $\\fbox{42}$", "42"),
    ("$\\boxed {\\left( 3, \\frac{\\pi}{2} \\right)}.$", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    # MATH-500 style: boxed and then "The answer is:" on the last line
    ("so $\\boxed{(3, \\frac{\\pi}{2})}.$The answer is: (3, \\frac{\\pi}{2})", "(3, \\frac{\\pi}{2})"),
    ("Adding up gives 18 eggs.\nThe answer is 18.", "18"),
    ("So the final answer is $\\boxed{7}$.", "7"),
    ("We add them.\nAnswer: $-\\frac{3}{4}$", "-\\frac{3}{4}"),
    ("Q: what is 2+2?\nA: 4", "4"),
    ("Final Answer: 12", "12"),
    # Qwen2.5-Math: display math on single lines, the answer boxed inside \\( ... \\)
    ("\\[\n\\frac{4}{36} = \\frac{1}{9}\n\\]\n\nThus, the probability that the sum rolled is 9 is "
     "\\(\\boxed{\\frac{1}{9}}\\).", "\\frac{1}{9}"),
    ("Therefore, the correct graph is \\(\\boxed{A}\\).", "A"),
    ("**Final Answer**\n\\[\n\\boxed{1 \\frac{1}{4}}\n\\]", "1 \\frac{1}{4}"),
    ("The final answer is $\\boxed{5}$. I hope it is correct.", "5"),
    # GSM8K-style model output: the answer with its unit (grading strips the unit)
    ("So she pays 18 dollars.\nThe answer is 18 dollars.", "18 dollars"),
    # no answer stated (a generation cut off before its answer, too)
    ("She had 16 eggs and ate 3, so", None),
    ("I am not sure how to go on.", None),
    ("", None),
    (None, None),
    ("The box is $\\boxed{unclosed", None),
    # "the answer is" in the middle of a solution is a claim, not the final answer
    ("I think the answer is 5 but let me check.\nIt is 6 after all.", None),
]


@pytest.mark.parametrize(("text", "expected"), EXTRACTION_CASES)
def test_final_answer_is_extracted_from_each_convention(text, expected):
    assert extract_answer(text) == expected


def test_answer_heading_wins_over_an_earlier_boxed_answer():
    text = "Earlier I wrote $\\boxed{5}$.\n\nBut that was wrong.\n\n# Answer\n\n6"
    assert extract_answer(text) == "6"


def test_escaped_braces_do_not_end_a_boxed_answer():
    assert last_boxed("\\boxed{\\{a\\}}") == "\\{a\\}"


def test_cleaning_removes_dollars_box_and_full_stop_only():
    assert clean_answer(" $\\boxed{x^2}$. ") == "x^2"
    assert clean_answer("3.5") == "3.5"


def test_calculator_annotations_are_hidden_for_display_only():
    text = "Natalia sold 48/2 = <<48/2=24>>24 clips in May."
    assert strip_calculator_annotations(text) == "Natalia sold 48/2 = 24 clips in May."
    assert strip_calculator_annotations("no annotations < here >") == "no annotations < here >"


@pytest.mark.parametrize("text, kept", [
    ("3 + 4 = 7.\n\n# Answer\n\n7\n\nProblem: what is 2 + 2?\n\n# Answer\n\n4", "3 + 4 = 7.\n\n# Answer\n\n7"),
    ("x = 3\n#### 72\nand then more", "x = 3\n#### 72"),
    ("no answer yet, still working", "no answer yet, still working"),
])
def test_a_text_ends_at_the_first_answer_it_states(text, kept):
    assert end_of_answer(text) == kept
