"""The RL reward client against the running app: the web server, a real ml worker, the tiny PRM.

The client sends completions whole with a split mode; the server cuts them into steps with the
splitter its imports use, so the rewards are the model's scores of exactly those steps.
"""
import re
import threading
import time
from pathlib import Path

import pytest

from annotate.models import Project
from bench.loadtest import Server
from scoring.core.prm import StepProbability, aggregate
from scoring.rescoring.rescore import score_texts
from scoring.store import registry
from steps.splitting import split_steps
from stepwise_client import (
    AGGREGATIONS,
    EMPTY_REWARD,
    StepwiseClient,
    StepwiseError,
    make_prm_reward,
    make_prm_step_rewards,
    prm_reward,
    prm_step_rewards,
    score_answers,
    step_texts,
)
from tests.conftest import _test_database_url
from tests.stepwise_client.conftest import tiny_version
from tests.stepwise_client.scripted_server import ANSWERS, ScriptedServer

pytestmark = pytest.mark.django_db(transaction=True)

PROMPTS = [
    "What is 2 + 3?",
    [{"role": "system", "content": "Reason step by step."}, {"role": "user", "content": "What is 7 * 6?"}],
    "Compute 10 - 4.",
    "What is 1 + 1?",
]
COMPLETIONS = [
    "2 + 3 = 5.\n\nSo the sum is 5.\n\n# Answer\n\n5",
    [{"role": "assistant", "content": "7 * 6 = 42.\n\nThe answer is 42."}],
    "10 - 4 = 7.\n\nSo the answer is 7.",
    "",  # Nothing written: no step to score.
]


def expected_items() -> list[tuple[str, list[str]]]:
    """The problems, and the steps the server should cut, of the three completions that have text."""
    return [("What is 2 + 3?", split_steps(COMPLETIONS[0])),
            ("What is 7 * 6?", split_steps(COMPLETIONS[1][0]["content"])),
            ("Compute 10 - 4.", split_steps(COMPLETIONS[2]))]


def expected_step_scores(version) -> list[list[float]]:
    """What the model itself gives the same steps, computed in this process."""
    return [[step["p"] for step in steps] for steps in score_texts(items=expected_items(), model_version=version)]


def test_rewards_from_the_live_app_are_the_models_step_scores_aggregated(web, worker, token, tiny_folder,
                                                                           monkeypatch):
    version = tiny_version(tiny_folder)
    monkeypatch.setenv("STEPWISE_URL", web.url)
    monkeypatch.setenv("STEPWISE_TOKEN", token)
    expected = expected_step_scores(version)

    # Batches of 2: the three scorable completions go out in two requests, side by side.
    client = StepwiseClient(batch_size=2, concurrency=2)
    dense = make_prm_step_rewards(client=client)(PROMPTS, COMPLETIONS)
    assert [len(steps) for steps in dense] == [3, 2, 2, 0]  # PRM800K's "# Answer" block is a step
    for got, want in zip(dense[:3], expected, strict=True):
        assert got == pytest.approx(want, abs=1e-6)
    assert dense[3] == []

    # The server split each completion as imports are split, and says where it cut.
    answers = score_answers(PROMPTS, COMPLETIONS, client=client)
    assert [step_texts(answer) for answer in answers[:3]] == [steps for _, steps in expected_items()]
    assert answers[3] is None  # never sent
    # Each reward is the solution score the server computed by its one rule, and sent; steps
    # sent already split (the older request shape) are scored the same.
    for answer, by_steps, steps in zip(answers[:3], client.answers(expected_items()), expected, strict=True):
        assert answer["score"] == pytest.approx(aggregate([StepProbability(p=p) for p in steps]), abs=1e-6)
        assert by_steps["score"] == pytest.approx(answer["score"], abs=1e-6)
    for how in AGGREGATIONS:
        reward = make_prm_reward(aggregation=how, client=client)
        assert reward.__name__ == f"stepwise_prm_{how}"  # What TRL logs it under.
        # As TRL calls it: keywords, its own extras, and the dataset's columns, whatever their names.
        rewards = reward(prompts=PROMPTS, completions=COMPLETIONS, completion_ids=[[1]] * 4, trainer_state=None,
                         split=["train"] * 4, aggregation=["?"] * 4, client=["?"] * 4)
        model = [aggregate([StepProbability(p=p) for p in steps])[how] for steps in expected]
        assert rewards == pytest.approx([*model, 0.0], abs=1e-6)

    # The plain functions read STEPWISE_URL / STEPWISE_TOKEN: min, and the dense rewards.
    assert prm_reward(PROMPTS, COMPLETIONS, split=["test"] * 4) == pytest.approx(
        [*(min(steps) for steps in expected), 0.0], abs=1e-6)
    assert prm_step_rewards(PROMPTS[:1], COMPLETIONS[:1])[0] == pytest.approx(expected[0], abs=1e-6)


def readme_dense_reward_example() -> tuple[str, str]:
    """The README's dense-reward line exactly as printed, and the result its comment promises."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    line = next(line for line in readme.splitlines() if line.startswith("dense = prm_step_rewards("))
    code, _, promised = line.partition("  # ")
    return code, promised


def test_the_readmes_dense_reward_example_gives_what_its_comment_says(web, worker, token, tiny_folder, monkeypatch):
    """As printed: one reward per PRM800K step, the `# Answer` block one of them."""
    version = tiny_version(tiny_folder)
    monkeypatch.setenv("STEPWISE_URL", web.url)
    monkeypatch.setenv("STEPWISE_TOKEN", token)
    code, promised = readme_dense_reward_example()
    namespace: dict = {"prm_step_rewards": prm_step_rewards}
    exec(code, namespace)  # The README's own line, run as a reader would
    assert re.fullmatch(r"\[\[p1, p2\]\]", promised)
    steps = ["2 + 3 = 5.", "# Answer\n\n5"]
    want = [step["p"] for step in score_texts(items=[("What is 2 + 3?", steps)], model_version=version)[0]]
    assert len(namespace["dense"]) == 1 and namespace["dense"][0] == pytest.approx(want, abs=1e-6)


def test_a_503_is_retried_until_a_model_is_current(web, worker, token, tiny_folder):
    version = tiny_version(tiny_folder, make_current=False)
    client = StepwiseClient(web.url, token, backoff=0.5, retries=8)

    def promote_soon():
        time.sleep(1.5)
        registry.set_current_model(version, project=Project.objects.sole())

    promoter = threading.Thread(target=promote_soon)
    promoter.start()
    started = time.monotonic()
    rewards = make_prm_reward(client=client)(PROMPTS[:1], COMPLETIONS[:1])
    promoter.join()
    assert time.monotonic() - started >= 1.5  # Answered only after the model became current.
    assert rewards == pytest.approx([min(expected_step_scores(version)[0])], abs=1e-6)


def test_a_429_is_retried_after_the_wait_the_server_names(worker, token, tiny_folder):
    """One request a second per user: of three batches sent at once, the later ones wait and pass."""
    tiny_version(tiny_folder)
    throttled = Server(database_url=_test_database_url(), workers=1,
                       extra_env={"STEPWISE_SCORE_RATE": "1/second"})
    try:
        throttled.wait_until_up(90)
        client = StepwiseClient(throttled.url, token, batch_size=1, retries=10, backoff=5)
        started = time.monotonic()
        rewards = make_prm_reward(client=client)(PROMPTS[:3], COMPLETIONS[:3])
    finally:
        throttled.stop()
    assert len(rewards) == 3 and all(0 < r < 1 for r in rewards)
    # Retry-After (about a second), not the 5 s backoff, set the pace.
    assert 1 <= time.monotonic() - started < 10


def test_a_server_that_does_not_answer_is_retried_then_reported(web):
    client = StepwiseClient("http://127.0.0.1:9", "t", retries=2, backoff=0.1, timeout=2)
    with pytest.raises(StepwiseError, match="failed after 3 attempts"):
        make_prm_reward(client=client)(PROMPTS[:1], COMPLETIONS[:1])


def test_a_split_mode_the_server_does_not_know_fails_at_once_naming_it(web, token):
    client = StepwiseClient(web.url, token, backoff=5, retries=5)
    started = time.monotonic()
    with pytest.raises(StepwiseError, match=r"400.*split"):
        make_prm_reward(client=client, split="paragraph")(PROMPTS[:1], COMPLETIONS[:1])
    assert time.monotonic() - started < 5  # Not retried: the request itself is wrong.


def test_a_bad_token_fails_at_once_naming_the_status(web):
    client = StepwiseClient(web.url, "not-a-token", backoff=5, retries=5)
    started = time.monotonic()
    with pytest.raises(StepwiseError, match="401"):
        make_prm_reward(client=client)(PROMPTS[:1], COMPLETIONS[:1])
    assert time.monotonic() - started < 5  # Not retried: retrying cannot fix a token.


def test_the_client_needs_a_url_and_a_token(monkeypatch):
    monkeypatch.delenv("STEPWISE_URL", raising=False)
    monkeypatch.delenv("STEPWISE_TOKEN", raising=False)
    with pytest.raises(StepwiseError, match="STEPWISE_URL"):
        StepwiseClient()
    with pytest.raises(StepwiseError, match="STEPWISE_TOKEN"):
        StepwiseClient("http://127.0.0.1:1")
    with pytest.raises(ValueError, match="aggregation"):
        make_prm_reward(aggregation="median", client=StepwiseClient("http://127.0.0.1:1", "t"))


def test_the_reward_names_a_server_whose_answer_has_no_solution_score():
    """The reward is the server's solution score, never recomputed here: an older server's answer fails clearly."""
    old_answer = {"/api/score": {"model": "m", "items": [{"steps": ANSWERS["/api/score"]["items"][0]["steps"]}]}}
    with ScriptedServer([], answers=old_answer) as server, pytest.raises(StepwiseError, match="no solution `score`"):
        make_prm_reward(client=StepwiseClient(server.url, "t"))(PROMPTS[:1], COMPLETIONS[:1])


def test_the_rewards_send_completions_whole_with_the_split_mode():
    """The client splits nothing: each completion with text goes out as one string, beside the mode."""
    with ScriptedServer([]) as server:
        client = StepwiseClient(server.url, "t", batch_size=1)
        rewards = make_prm_reward(client=client, split="sentence")(PROMPTS, COMPLETIONS)
    assert rewards == [0.75, 0.75, 0.75, EMPTY_REWARD]
    assert [body["items"] for body in server.bodies] == [
        [{"problem": "What is 2 + 3?", "completion": COMPLETIONS[0], "split": "sentence"}],
        [{"problem": "What is 7 * 6?", "completion": COMPLETIONS[1][0]["content"], "split": "sentence"}],
        [{"problem": "Compute 10 - 4.", "completion": COMPLETIONS[2], "split": "sentence"}],
    ]


def test_a_completion_with_no_text_earns_the_empty_reward_without_asking_the_server():
    blank = ["", " \n\n\t ", [{"role": "assistant", "content": "  "}], [{"role": "assistant", "content": []}]]
    with ScriptedServer([]) as server:
        client = StepwiseClient(server.url, "t")
        assert make_prm_reward(client=client)(PROMPTS, blank) == [EMPTY_REWARD] * 4
        assert make_prm_step_rewards(client=client)(PROMPTS, blank) == [[]] * 4
    assert server.requests == 0
