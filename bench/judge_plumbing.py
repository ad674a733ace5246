"""A judge on real model responses, end to end: imported, asked, stored, shown, exported.

`bench_judge` builds on this. Real Qwen2.5-Math responses (tests/data/model-responses, with each
response's published correctness `score`) go through the product's import into a project of their
own per judge; the product's judge job (`judge_labeling`, run in-process as `label_judge --inline`
does) asks the judge about them; then each stage a person or a trainer meets is read back: the
answers stored (parsed or not, and why not), the sources reader and its API, and the exports with
`--labels judge`. Nothing here decides a verdict: every figure is read from what the product stored.

Where a verdict's probability came from is not stored (only the probability is), so the job's
generator is wrapped to keep each answer's logprobs, and the share read from them is recomputed
with the product's own reader (`judging.verdict_probability`).
"""
from __future__ import annotations

import json
import math
import re
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test.utils import override_settings
from rest_framework.test import APIClient

from annotate.labeling import roles, sources
from annotate.models import AutoLabelRun, AutoStepLabel, JudgeAnswer, Project, Solution
from annotate.pool import importing
from bench.data import DATA
from scoring.generation import judge_labeling, judging, labeling_jobs
from scoring.generation.generators import Generator, SamplingParams
from scoring.models import JudgeLabelJob
from steps import verification

RESPONSES = DATA / "model-responses" / "math_qwen25_cot_20x8.jsonl"
EXPORT_FORMATS = ("soft", "trl", "openrlhf", "critique")


# --- the solutions --------------------------------------------------------------------------------------


def pool_lines(path: Path = RESPONSES, *, limit: int) -> list[dict]:
    """`limit` responses as generic pool lines, wrong and right in turn while both last (only 6 of the
    160 are wrong: without this a small sample holds none); right ones spread over the problems."""
    problems = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    wrong, right = [], []
    for response_index in range(max(len(p["response"]) for p in problems)):
        for line_index, problem in enumerate(problems):
            if response_index < len(problem["response"]):
                pick = (line_index, response_index)
                (right if problem["score"][response_index] else wrong).append(pick)
    order = [pick for pair in zip(wrong, right) for pick in pair]
    order += [pick for pick in wrong + right if pick not in order]
    return [_line(problems[i], i, j) for i, j in order[:limit]]


def _line(problem: dict, line_index: int, response_index: int) -> dict:
    return {"problem": problem["question"], "ground_truth_answer": problem["answer"],
            "solution": problem["response"][response_index], "generator": "Qwen2.5-Math-7B-Instruct",
            "source": "qwen25-math-cot",
            "meta": {"score": bool(problem["score"][response_index]), "line": line_index, "response": response_index}}


def import_into(project: Project, lines: Sequence[dict], folder: Path) -> int:
    """The lines through the product's import (format generic) into `project`; its solution count."""
    path = folder / f"{project.slug}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    importing.import_pool(project=project, path=path, format="generic")
    return Solution.objects.filter(project=project).count()


# --- a judge that keeps to the form ---------------------------------------------------------------------


# Served in turn by `bench.openai_server --answers` (whatever the solution): two answers in the
# form, one with its verdicts' logprobs; one in no form; one cut at max_tokens. Each of the first two
# parses on any solution of two or more steps (the verdicts stop at an incorrect step).
SCRIPTED = (
    ("The first step restates what is asked and sets up the count correctly.", True,
     "The second step miscounts the cases it lists, so its total is wrong.", False),
    ("The first step misreads the problem: it answers a different question.", False),
)


def scripted_answers() -> list[dict]:
    """The scripted judge's answers (`--answers` entries); the first carries logprobs per word."""
    first, second = (verification.verification_chain(list(zip(entry[::2], entry[1::2], strict=True)))
                     for entry in SCRIPTED)
    return [
        {"text": first, "logprobs": _word_logprobs(first)},
        {"text": second},
        {"text": "Looks fine to me, every step checks out."},
        {"text": "The first step is right.\nStep 1: correct\nThe second", "finish_reason": "length"},
    ]


def _word_logprobs(text: str) -> list:
    """Per word and space a "token" (rebuilding `text` exactly); at a verdict, both verdicts as
    alternatives, the written one at 0.9."""
    tokens = re.findall(r"\S+|\s+", text)
    sure, unsure = math.log(0.9), math.log(0.1)
    alternatives = {verification.GOOD: verification.BAD, verification.BAD: verification.GOOD}
    return [[token, sure, {token: sure, alternatives[token]: unsure}] if token in alternatives else [token, 0.0, {}]
            for token in tokens]


# --- asking the judge ----------------------------------------------------------------------------------


class Recorder:
    """A generator that keeps each answer it returns (None for a call that raised), in call order."""

    def __init__(self, inner: Generator):
        self.inner, self.name, self.usage = inner, inner.name, inner.usage
        self.samples: list = []

    def generate(self, prompts, params: SamplingParams):
        try:
            found = self.inner.generate(prompts, params)
        except Exception:
            self.samples.append(None)
            raise
        self.samples.extend(row[0] for row in found)
        return found


@dataclass
class Arm:
    """One judge asked one way: a label, its generator spec, the prompt template."""

    name: str
    spec: dict
    template: str
    template_name: str
    scripted: bool = False


@dataclass
class ArmReport:
    name: str
    template: str
    figures: dict = field(default_factory=dict)


def run_arm(arm: Arm, *, project: Project, params: SamplingParams) -> tuple[JudgeLabelJob, Recorder, float]:
    """The judge job on every eligible solution of the project, in this process; its wall seconds
    (the generator is loaded before the clock starts: a worker loads it once)."""
    spec = labeling_jobs.resolve_spec(arm.spec)
    recorder = Recorder(labeling_jobs.load_generator(spec))
    job = judge_labeling.start_judge_labeling(project=project, generator_spec=spec, params=params,
                                              template=arm.template, enqueue=False)
    started = time.perf_counter()
    with mock.patch.object(labeling_jobs, "load_generator", lambda _spec: recorder):
        labeling_jobs.run_here(judge_labeling.run_judge_job, job_id=job.pk)
    seconds = time.perf_counter() - started
    job.refresh_from_db()
    return job, recorder, seconds


def answer_figures(job: JudgeLabelJob, recorder: Recorder, seconds: float) -> dict:
    """What the job stored: answers, parsed share, reasons, tokens, time, logprob-read verdicts."""
    answers = list(JudgeAnswer.objects.filter(run=job.run_id).order_by("pk"))
    parsed = [a for a in answers if a.parsed]
    labels = Counter(AutoStepLabel.objects.filter(run=job.run_id).values_list("step__solution_id", flat=True))
    from_logprobs = sum(_verdicts_from_logprobs(sample, labels[answer.solution_id])
                        for answer, sample in zip(answers, recorder.samples, strict=False) if answer.parsed)
    verdicts = sum(labels.values())
    return {
        "state": job.state, "solutions": job.total, "answers": len(answers), "parsed": len(parsed),
        "parsed_share": len(parsed) / len(answers) if answers else 0.0,
        "unparseable": job.unparseable, "reasons": dict(Counter(_reason(a.error) for a in answers if not a.parsed)),
        "examples": {_reason(a.error): a.text[:200] for a in reversed(answers) if not a.parsed},
        "answers_with_logprobs": sum(sample is not None and bool(sample.logprobs) for sample in recorder.samples),
        "prompt_tokens": sum(a.prompt_tokens for a in answers), "completion_tokens": AutoLabelRun.objects.get(
            pk=job.run_id).tokens, "seconds": seconds, "seconds_per_solution": seconds / len(answers) if answers
        else 0.0, "verdicts": verdicts, "verdicts_from_logprobs": from_logprobs,
        "logprob_share": from_logprobs / verdicts if verdicts else None,
    }


def _reason(error: str) -> str:
    """An unparseable answer's kind: its reason up to the colon ("truncated", "no verdicts", ...)."""
    return error.split(":", 1)[0] or "unknown"


def _verdicts_from_logprobs(sample, stored: int) -> int:
    """How many of an answer's first `stored` verdicts took their probability from its logprobs."""
    if sample is None:
        return 0
    count = 0
    for match in list(judging.VERDICT_LINE.finditer(sample.text))[:stored]:
        p = judging.verdict_probability(sample.logprobs, sample.text, match.start("verdict"))
        count += p is not None and (p >= 0.5) == (match["verdict"].lower() == verification.GOOD)
    return count


# --- shown and exported ----------------------------------------------------------------------------------


def shown(project: Project, run_id: int) -> dict:
    """For the first parsed solution: the steps the sources reader gives a judge word (and a
    critique), against the labels stored; and whether the API gives a reviewer the same words."""
    labeled = list(AutoStepLabel.objects.filter(run=run_id).order_by("step__solution_id", "step__index")
                   .values_list("step__solution_id", "soft", "critique"))
    if not labeled:
        return {"solution": None}
    solution_id = labeled[0][0]
    stored = [(soft, critique) for sid, soft, critique in labeled if sid == solution_id]
    steps = sources.for_solutions([solution_id])[solution_id]
    words = [(step.judge.soft, step.judge.critique) for step in steps if step.judge is not None]
    api = _api_words(project, solution_id)
    return {"solution": solution_id, "steps": len(steps), "stored": len(stored), "shown": len(words),
            "with_critique": sum(bool(critique) for _, critique in words), "reader_matches": words == stored,
            "api_matches": api == words, "example_critique": next((c for _, c in words if c), "")[:160]}


def _api_words(project: Project, solution_id: int) -> list[tuple[float, str]] | None:
    """The judge's words per step as `GET /p/<slug>/api/solutions/<id>/sources` gives a reviewer."""
    user, _ = get_user_model().objects.get_or_create(username=f"bench-judge-{project.slug}")
    roles.grant_role(user, roles.REVIEWER, project)
    client = APIClient()
    client.force_authenticate(user)
    with override_settings(ALLOWED_HOSTS=["testserver"]), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="No directory at")  # whitenoise: no collected static files here
        response = client.get(f"/p/{project.slug}/api/solutions/{solution_id}/sources")
    if response.status_code != 200:
        return None
    return [(step["judge"]["soft"], step["judge"]["critique"]) for step in response.json()["steps"] if step["judge"]]


def exported(project: Project, folder: Path) -> dict:
    """`export_prm800k --labels judge` in each format, written and read back: rows, steps labeled."""
    found = {}
    for name in EXPORT_FORMATS:
        path = folder / f"{project.slug}-{name}.jsonl"
        call_command("export_prm800k", str(path), "--project", project.slug, "--format", name, "--labels", "judge",
                     stdout=open(path.with_suffix(".log"), "w"))
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        found[name] = {"rows": len(rows), "steps": sum(map(STEPS_LABELED[name], rows))}
    return found


def _critique_steps(row: dict) -> int:
    answer = next(m["content"] for m in row["messages"] if m["role"] == "assistant")
    return len(judging.VERDICT_LINE.findall(answer))


# Steps carrying a judge label in one row of each format (its fields: the formats' own docs).
STEPS_LABELED = {
    "soft": lambda row: sum(row["n"]),
    "trl": lambda row: len(row["labels"]),
    "openrlhf": lambda row: len(row["label"]),
    "critique": _critique_steps,
}


def agreement(run_id: int) -> dict:
    """On parsed answers: how often the judge's "no error found" matches the response's published
    correctness (`score`), read through the sources reader; n and the 2x2 counts."""
    parsed = JudgeAnswer.objects.filter(run=run_id, parsed=True).values_list("solution_id", "solution__meta")
    score = {solution_id: meta["score"] for solution_id, meta in parsed}
    cells: Counter = Counter()
    for solution_id, steps in sources.for_solutions(list(score)).items():
        said, first = sources.first_error_said([step.verdict("judge") for step in steps])
        judged_right = said and first is None
        cells[f"{'no_error' if judged_right else 'error'}_{'right' if score[solution_id] else 'wrong'}"] += 1
    n = sum(cells.values())
    agree = cells["no_error_right"] + cells["error_wrong"]
    return {"n": n, "agree": agree, "share": agree / n if n else None, **cells}
