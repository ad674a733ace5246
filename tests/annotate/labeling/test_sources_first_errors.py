"""What the sources page compares, read from every source's verdicts (annotate.labeling.sources):
the people's majority, where a source puts the first error, and how many pairs of sources differ."""
from annotate.labeling import sources
from annotate.labeling.sources import StepSources


def test_the_people_say_what_most_of_them_say_a_neutral_counting_as_good_and_a_tie_saying_nothing():
    assert sources.majority([1, 0, -1]) is True
    assert sources.majority([-1, -1, 1]) is False
    assert sources.majority([1, -1]) is None
    assert sources.majority([]) is None


def test_a_source_that_calls_a_step_bad_puts_the_first_error_there():
    assert sources.first_error_said([True, False, None, False]) == (True, 1)


def test_no_error_is_said_only_by_a_source_that_called_every_step_good():
    assert sources.first_error_said([True, True, True]) == (True, None)
    # Two of three steps judged, both good: the third is not known to be right.
    assert sources.first_error_said([True, True, None]) == (False, None)
    assert sources.first_error_said([]) == (False, None)


def test_pairs_of_sources_differ_only_where_both_said_something():
    step = StepSources(index=0, text="a", human=(1,), judge=sources.JudgeWord(soft=0.2, critique="", good=False),
                       prm=0.9)
    # human ✓, rollouts ·, judge ✗, prm ✓: human·judge and judge·prm differ; rollouts say nothing.
    assert sources.disagreeing_pairs(step.verdicts()) == 2
    assert sources.PAIRS == (("human", "rollouts"), ("human", "judge"), ("human", "prm"), ("rollouts", "judge"),
                             ("rollouts", "prm"), ("judge", "prm"))
