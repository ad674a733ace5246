"""Two projects with different rules, labeled at once over HTTP by their own annotators: each
project's rules hold in it, nobody is served the same work twice, and no label lands in the
wrong project."""
import re
from collections import Counter

import pytest
import requests

from annotate.labeling import queueing, roles
from annotate.models import Annotation, LabelingConfig, Project, Step
from tests.factories import SolutionFactory, UserFactory
from tests.threads import run_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgresql, pytest.mark.slow]
PASSWORD = "pass-for-tests"  # tests.factories.UserFactory's
STEPS = ["Step one.", "Step two.", "# Answer\n\n4"]


def project_with(slug: str, solutions: int, gold: int = 0, **rules) -> Project:
    project = Project.objects.create(slug=slug, name=slug.upper())
    LabelingConfig.objects.update_or_create(project=project, defaults={"screening_required": False, **rules})
    for _ in range(solutions):
        SolutionFactory(problem__project=project, project=project, steps=STEPS)
    for _ in range(gold):
        solution = SolutionFactory(problem__project=project, project=project, steps=STEPS, is_gold=True)
        Step.objects.filter(solution=solution).update(gold_rating=1)
    queueing.ensure_default_queue(project)
    return project


class Annotator:
    """A person at a browser: signs in, then claims, rates and submits until nothing is left."""

    def __init__(self, base: str, username: str, slug: str, first_error_at: int | None):
        self.base, self.username, self.slug, self.first_error_at = base, username, slug, first_error_at
        self.session = requests.Session()
        self.refusals: list[str] = []

    def post(self, path: str, htmx: bool = False, **data) -> requests.Response:
        headers = {"X-CSRFToken": self.session.cookies["csrftoken"], "Referer": self.base}
        if htmx:  # as the labeling page's buttons post: the answer is the changed task, or the refusal
            headers["HX-Request"] = "true"
        return self.session.post(f"{self.base}{path}", data=data, headers=headers, allow_redirects=False, timeout=60)

    def sign_in(self) -> None:
        self.session.get(f"{self.base}/accounts/login/", timeout=60)
        answer = self.post("/accounts/login/", username=self.username, password=PASSWORD,
                           csrfmiddlewaretoken=self.session.cookies["csrftoken"])
        assert answer.status_code == 302, answer.text[:300]

    def label_until_empty(self) -> None:
        self.sign_in()
        while (task := self.claim()) is not None:
            for index in range(len(STEPS)):
                rating = -1 if index == self.first_error_at else 1
                answer = self.post(f"/p/{self.slug}/label/{task}/rate", htmx=True, index=index, rating=rating)
                if answer.status_code != 200:
                    self.refusals.append(answer.text)
            reason = "found_error" if self.first_error_at is not None else "solution"
            answer = self.post(f"/p/{self.slug}/label/{task}/submit", finish_reason=reason, then="home")
            assert answer.status_code == 302, answer.text[:300]

    def claim(self) -> int | None:
        answer = self.post(f"/p/{self.slug}/label/next")
        if answer.status_code == 302:  # nothing left: sent home
            return None
        assert answer.status_code == 200, answer.text[:300]
        start = self.session.get(f"{self.base}/p/{self.slug}/label/", allow_redirects=False, timeout=60)
        return int(re.search(r"/label/(\d+)/$", start.headers["Location"])[1])


def test_two_projects_labeled_at_once_keep_their_own_rules_and_labels(live_server):
    # GSM: two annotators per solution, no gold, the task ends at the first error.
    gsm = project_with("gsm", solutions=5, overlap_k=2, qc_rate=0.0, stop_at_first_error=True)
    # MATH: one annotator per solution, half the tasks gold, rating goes on after an error.
    math = project_with("math", solutions=6, gold=2, overlap_k=1, qc_rate=0.5, stop_at_first_error=False)
    people = []
    for project, prefix in ((gsm, "g"), (math, "m")):
        for i in range(3):
            user = UserFactory(username=f"{prefix}{i}")
            roles.grant_role(user, roles.ANNOTATOR, project)
            people.append(Annotator(live_server.url, user.username, project.slug, first_error_at=1))

    run_threads([person.label_until_empty for person in people])

    annotations = Annotation.objects.select_related("solution", "annotator")
    assert annotations.count() > 0
    # No label in the wrong project: each annotation, its solution and its annotator agree.
    for annotation in annotations:
        assert annotation.project_id == annotation.solution.project_id
        assert annotation.annotator.username[0] == {gsm.pk: "g", math.pk: "m"}[annotation.project_id]
    # Nobody was served the same solution twice; overlap is each project's own.
    assert max(Counter(annotations.values_list("annotator_id", "solution_id")).values()) == 1
    ordinary = annotations.filter(is_quality_control=False, status=Annotation.Status.SUBMITTED)
    per_solution = {project.slug: Counter(ordinary.filter(project=project).values_list("solution_id", flat=True))
                    for project in (gsm, math)}
    assert set(per_solution["gsm"].values()) == {2} and len(per_solution["gsm"]) == 5
    assert set(per_solution["math"].values()) == {1} and len(per_solution["math"]) == 6
    # Gold only where the project asks for it.
    assert not annotations.filter(project=gsm, is_quality_control=True).exists()
    assert annotations.filter(project=math, is_quality_control=True).exists()
    # The first-error stop is GSM's alone: its tasks refused the step after the -1; MATH's rated it.
    gsm_people = [p for p in people if p.slug == "gsm"]
    math_people = [p for p in people if p.slug == "math"]
    assert all("first error" in " ".join(p.refusals) for p in gsm_people), [p.refusals[:1] for p in gsm_people]
    assert not any(p.refusals for p in math_people), [p.refusals[:1] for p in math_people]
    assert set(annotations.filter(project=gsm).values_list("finish_reason", flat=True)) == {"found_error"}
