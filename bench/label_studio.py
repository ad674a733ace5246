"""Label Studio 1.23 measured as `bench_http` measures Stepwise: on the same machine, the same day.

A comparison, not part of Stepwise. Figures quoted for Label Studio elsewhere were taken on
another day's machine, and this VM's speed varies by more than the margins between the goals
and the figures; this runs the peer with the same driver, the same server shape (gunicorn
2 workers x 4 threads) and the same CPU accounting, so the two can be put side by side.
Label Studio lives in its own virtual environment (its Django is not ours), on PostgreSQL:

    python3 -m venv /tmp/ls && /tmp/ls/bin/pip install label-studio==1.23.2 gunicorn
    createdb -h 127.0.0.1 -U postgres labelstudio
    .venv/bin/python bench/label_studio.py --ls-venv /tmp/ls --pool 50000 --clients 1,10

Each simulated annotator logs in (`/user/login/`), then, per task, does what Label Studio's
labeling stream asks of the server: `GET /api/projects/<id>/next/` (the next task, locked to
the annotator) and `POST /api/tasks/<id>/annotations/` (the whole annotation, one rating per
step, as the editor sends it on submit). Label Studio saves nothing per click, so that is
2 requests per task against Stepwise's 5, and the page and its assets are not fetched: a
lighter load than Stepwise's, so a ratio against it flatters Label Studio, not us.

`./stepwise bench bench_http --label-studio /tmp/ls` runs both in one command, Stepwise then
Label Studio for each client count, and prints their CPU per labeled task side by side.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import loadtest  # noqa: E402 - after the path above

PASSWORD = "bench-label-studio-1"
DATABASE = "labelstudio"  # PostgreSQL's, on 127.0.0.1
STEPS = 4
CONFIG = """<View>
  <Text name="problem" value="$problem"/>
  <Paragraphs name="steps" value="$steps" layout="dialogue"/>
  <ParagraphLabels name="rating" toName="steps">
    <Label value="+1"/><Label value="0"/><Label value="-1"/>
  </ParagraphLabels>
</View>"""
# Run inside Label Studio's own Django (manage.py shell): the owner, N annotators, one project.
# A project from an earlier run is kept, as bench_http keeps Stepwise's pool, if it holds the
# pool: its labeled tasks are not served again, and deleting 50,000 tasks through Label Studio's
# models takes minutes.
SETUP = """
from users.models import User
from organizations.models import Organization, OrganizationMember
from projects.models import Project
owner = User.objects.filter(email="owner@bench.local").first()
if owner is None:
    owner = User.objects.create_user(email="owner@bench.local", password={password!r}, username="owner")
    org = Organization.create_organization(created_by=owner, title="bench")
    owner.active_organization = org
    owner.save()
org = owner.active_organization
for i in range({annotators}):
    email = f"annotator{{i}}@bench.local"
    if not User.objects.filter(email=email).exists():
        user = User.objects.create_user(email=email, password={password!r}, username=f"annotator{{i}}")
        OrganizationMember.objects.get_or_create(user=user, organization=org)
        user.active_organization = org
        user.save()
project = Project.objects.filter(title="bench").first()
if project is None or project.tasks.count() != {pool}:
    Project.objects.filter(title="bench").delete()
    project = Project.objects.create(title="bench", created_by=owner, organization=org, label_config={config!r})
    print("NEW")
print("PROJECT", project.pk)
"""


class LabelStudioAnnotator(loadtest.Annotator):
    """A Label Studio annotator: the labeling stream's two requests per task."""

    project = int(os.environ.get("BENCH_LS_PROJECT", "0"))

    def log_in(self) -> None:
        self._log_in_form("/user/login/", {"email": f"{self.username}@bench.local", "password": self.password,
                                           "persist_session": "on"})

    def label_one(self, page) -> bool | None:
        started = time.perf_counter()
        response = self._send("GET", f"/api/projects/{self.project}/next/")
        self.result.time(loadtest.NEXT, (time.perf_counter() - started) * 1000)
        if response.status_code == 404:
            return False  # Nothing left to label.
        if response.status_code != 200:
            return None
        task = json.loads(response.text)
        self.result.claimed.append(task["id"])
        steps = task["data"]["steps"]
        result = [{
            "id": f"s{index}", "from_name": "rating", "to_name": "steps", "type": "paragraphlabels",
            "value": {"start": str(index), "end": str(index), "startOffset": 0,
                      "endOffset": len(step["text"]), "paragraphlabels": ["+1"]},
        } for index, step in enumerate(steps)]
        started = time.perf_counter()
        response = self._post(f"/api/tasks/{task['id']}/annotations/?project={self.project}", json_body={
            "result": result, "lead_time": 5.0, "was_cancelled": False, "ground_truth": False})
        self.result.time(loadtest.SUBMIT, (time.perf_counter() - started) * 1000)
        if response.status_code == 201:
            self.result.submitted.append(task["id"])
        return None


def _env(venv: Path, database: str) -> dict[str, str]:
    return {
        **os.environ, "DJANGO_DB": "default", "POSTGRE_NAME": database, "POSTGRE_USER": "postgres",
        "POSTGRE_PASSWORD": "", "POSTGRE_HOST": "127.0.0.1", "POSTGRE_PORT": "5432",
        "LABEL_STUDIO_BASE_DATA_DIR": f"/tmp/ls-bench-{database}",
        "DJANGO_SETTINGS_MODULE": "core.settings.label_studio",
        "LOG_LEVEL": "WARNING", "DEBUG": "false", "SECRET_KEY": "bench-label-studio-not-secret",
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
    }


def _package(venv: Path) -> Path:
    (found,) = venv.glob("lib/python3*/site-packages/label_studio")
    return found


def set_up(venv: Path, database: str, annotators: int, pool: int) -> tuple[int, bool]:
    """Migrate Label Studio's database, make the users and a project (kept from an earlier run
    if it holds `pool` tasks); returns its id and whether it is new (empty)."""
    env, cwd = _env(venv, database), _package(venv)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "manage.py", "migrate", "-v0"], cwd=cwd, env=env, check=True, capture_output=True)
    code = SETUP.format(password=PASSWORD, annotators=annotators, config=CONFIG, pool=pool)
    out = subprocess.run([python, "manage.py", "shell", "-c", code], cwd=cwd, env=env, check=True,
                         capture_output=True, text=True).stdout
    return int(re.search(r"PROJECT (\d+)", out).group(1)), "NEW" in out.split()


def tasks(pool: int) -> list[dict]:
    """A word problem and a 4-step solution per task, of the size Stepwise's bench pool has."""
    return [{
        "problem": f"Problem {n}: a shop sells {n % 97 + 3} apples a day for {n % 13 + 2} dollars each. "
                   f"How much does it take in over {n % 7 + 2} days?",
        "steps": [{"author": f"step {i + 1}", "text": f"Step {i + 1} of solution {n}: we compute "
                   f"{n % 97 + 3} x {n % 13 + 2} = {(n % 97 + 3) * (n % 13 + 2)} and carry it on to the next line."}
                  for i in range(STEPS)],
    } for n in range(pool)]


class LabelStudioServer(loadtest.RunningServer):
    """Label Studio's WSGI app under gunicorn, 2 workers x 4 threads, as bench_http serves Stepwise."""

    def __init__(self, venv: Path, database: str):
        port = loadtest.free_port()
        self.process = subprocess.Popen(
            [str(venv / "bin" / "gunicorn"), "core.wsgi:application", "--bind", f"127.0.0.1:{port}",
             "--workers", "2", "--threads", "4", "--log-level", "warning", "--timeout", "120"],
            cwd=_package(venv), env=_env(venv, database), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        super().__init__(f"http://127.0.0.1:{port}", self.process.pid)

    def wait_until_up(self, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if loadtest.Connection(self.url).request("GET", "/user/login/").status_code == 200:
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"Label Studio did not answer within {seconds} s")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def import_pool(url: str, project: int, pool: int) -> float:
    """Import the pool through Label Studio's own import API, as its owner; returns the seconds."""
    owner = LabelStudioAnnotator(url, "owner", PASSWORD, deadline=float("inf"), max_requests=10**9)
    owner.log_in()
    started = time.perf_counter()
    answer = owner._post(f"/api/projects/{project}/import", json_body=tasks(pool))
    if answer.status_code != 201:
        raise RuntimeError(f"import: HTTP {answer.status_code}: {answer.text[:500]}")
    return time.perf_counter() - started


def stored_annotations(database: str, project: int) -> int:
    import psycopg

    with psycopg.connect(host="127.0.0.1", user="postgres", dbname=database) as db:
        return db.execute("SELECT count(*) FROM task_completion WHERE project_id = %s", [project]).fetchone()[0]


@contextmanager
def serving(venv: Path, database: str, *, pool: int, annotators: int) -> Iterator[LabelStudioServer]:
    """Label Studio up with `annotators` accounts and a project holding `pool` imported tasks; the
    project a client labels in is set where the spawned clients read it (on import)."""
    project, new = set_up(venv, database, annotators, pool)
    os.environ["BENCH_LS_PROJECT"] = str(project)
    LabelStudioAnnotator.project = project
    server = LabelStudioServer(venv, database)
    try:
        server.wait_until_up()
        imported = f"{pool:,} tasks imported in {import_pool(server.url, project, pool):.1f} s" if new else \
            f"the project of an earlier run, {pool:,} tasks"
        print(f"Label Studio 1.23 on PostgreSQL ({imported}); gunicorn 2 workers "
              f"x 4 threads; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
        yield server
    finally:
        server.stop()


def vacuum(database: str) -> None:
    """Vacuum and analyze Label Studio's database before a run, as bench_http does Stepwise's
    tables: autovacuum would on a production server, but it is off on this project's CI machines,
    and a planner without statistics of the 50,000 imported tasks measures the setup, not Label Studio."""
    import psycopg

    with psycopg.connect(host="127.0.0.1", user="postgres", dbname=database, autocommit=True) as db:
        db.execute("VACUUM (ANALYZE)")


def run(server: LabelStudioServer, database: str, clients: int, seconds: float) -> loadtest.Measured:
    """One run of `clients` annotators; prints its figures and returns them."""
    vacuum(database)
    users = [(f"annotator{i}", PASSWORD) for i in range(clients)]
    measured = loadtest.measure(base_url=server.url, users=users, seconds=seconds, max_requests=10**9, server=server,
                                database=database, annotator_class=LabelStudioAnnotator)
    served = Counter(task for r in measured.results for task in r.claimed)
    stored = stored_annotations(database, LabelStudioAnnotator.project)
    checks = (f"tasks served to two annotators: {sum(1 for count in served.values() if count > 1)}; "
              f"annotations stored in the project so far: {stored:,}")
    print("\n".join(loadtest.report(measured, (loadtest.NEXT, loadtest.SUBMIT), checks)))
    return measured


def side_by_side(stepwise: loadtest.Measured, label_studio: loadtest.Measured, clients: int) -> list[str]:
    """The two systems' runs under the same load as lines of text: server + database CPU per
    labeled task and how many times Stepwise's Label Studio's is, tasks per second, and each
    side's clients' own CPU apart (it is neither server's)."""
    ours, theirs = stepwise.cpu_per_task_ms, label_studio.cpu_per_task_ms
    times = f"{theirs / ours:.1f}x Stepwise's" if ours and theirs else "n/a"
    ms = loadtest.milliseconds

    def rate(run: loadtest.Measured) -> str:
        return f"{run.labeled / run.elapsed:.2f}" if run.elapsed else "n/a"

    return [f"\nside by side, {clients} client{'s' if clients != 1 else ''}: server + database CPU per labeled task: "
            f"Stepwise {ms(ours)}, Label Studio {ms(theirs)} ({times}); labeled tasks/s: "
            f"Stepwise {rate(stepwise)}, Label Studio {rate(label_studio)}",
            f"  the clients' own CPU per labeled task, counted in neither: Stepwise's "
            f"{ms(stepwise.per_task_ms(stepwise.clients_cpu_s))}, Label Studio's "
            f"{ms(label_studio.per_task_ms(label_studio.clients_cpu_s))}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ls-venv", type=Path, required=True, help="Label Studio's virtual environment")
    parser.add_argument("--database", default=DATABASE, help="An empty PostgreSQL database for Label Studio")
    parser.add_argument("--pool", type=int, default=50_000)
    parser.add_argument("--clients", default="1,10")
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    counts = [int(n) for n in args.clients.split(",")]
    with serving(args.ls_venv, args.database, pool=args.pool, annotators=max(counts)) as server:
        for n in counts:
            run(server, args.database, n, args.seconds)


if __name__ == "__main__":
    main()
