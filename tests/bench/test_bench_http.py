"""bench_http drives the real web server over HTTP and reports clean figures (not timed)."""
import http.server
import io
import re
import threading
import time

import pytest
from django.core.management import CommandError

import bench
from annotate.labeling import quality
from annotate.models import Annotation, LabelingConfig, Project, QueueItem, ScreeningResult, Solution
from bench import label_studio, loadtest
from bench.commands import bench_http
from bench.commands.bench_workspace import Command as WorkspaceBench
from tests.factories import SolutionFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]


@pytest.mark.slow
def test_two_annotators_over_http_leave_no_duplicates_no_lost_labels_and_no_5xx():
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"qc_rate": 0.3})
    out = io.StringIO()
    bench.call("bench_http", pool=60, clients="2", seconds=4, stdout=out)
    report = out.getvalue()

    assert "duplicate assignments: 0; lost labels: 0" in report
    summary = re.search(r"2 clients, [\d.]+ s: (\d+) tasks labeled \([\d.]+ tasks/s\), \d+ requests, "
                        r"(\d+) 5xx \([\d.]+ %\), (\d+) without an answer", report)
    assert summary, report
    labeled, errors_5xx, unanswered = (int(group) for group in summary.groups())
    assert labeled > 0 and errors_5xx == 0 and unanswered == 0
    assert "task page GET" not in report  # The claim answers with the page: 6 requests per task.
    for endpoint in ("next task", "claim POST", "rating save", "submit"):
        row = re.search(rf"^\s+{endpoint}\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", report, re.MULTILINE)
        assert row and int(row.group(1)) > 0, f"{endpoint} missing from:\n{report}"
    assert re.search(r"CPU per labeled task: server [\d.]+ ms", report), report
    clients = re.search(r"the clients' own CPU: ([\d.]+) ms per labeled task, (\d+) % of the machine's CPUs", report)
    assert clients and float(clients.group(1)) > 0, report  # they ran, so they spent some
    # What the clients were told was submitted is what the database holds.
    assert Annotation.objects.submitted().filter(annotator__username__startswith="bench-http-").count() == labeled
    assert LabelingConfig.of(Project.objects.sole()).qc_rate == 0.3  # The project's settings are restored.


@pytest.mark.slow
def test_under_the_product_defaults_annotators_pass_screening_get_gold_and_share_no_ordinary_item():
    out = io.StringIO()
    bench.call("bench_http", pool=80, clients="2", seconds=4, product_defaults=True, stdout=out)
    report = out.getvalue()

    assert "gold at 10%, screening required (5 items)" in report
    # Gold and screening items go to both annotators; those are not duplicate assignments.
    assert "duplicate assignments: 0; lost labels: 0" in report
    clients = Annotation.objects.filter(annotator__username__startswith="bench-http-")
    assert clients.filter(is_initial_screening=True, status="submitted").count() == 2 * 5
    assert ScreeningResult.objects.filter(annotator__username__startswith="bench-http-", passed=True).count() == 2
    assert clients.filter(is_quality_control=True).exists()
    config = LabelingConfig.of(Project.objects.sole())
    assert config.qc_rate == 0.1 and config.screening_required


@pytest.mark.slow
def test_beside_other_projects_the_bench_labels_only_its_own_project_under_its_own_urls():
    out = io.StringIO()
    bench.call("bench_http", pool=40, clients="2", seconds=3, site_projects=2, site_solutions=60, stdout=out)
    report = out.getvalue()

    assert "the site: 3 projects, 60 solutions in the others" in report, report
    assert "duplicate assignments: 0; lost labels: 0" in report and " 0 5xx " in report, report
    others = Project.objects.exclude(slug="default")
    assert sorted(others.values_list("slug", flat=True)) == ["bench-site-01", "bench-site-02"]
    for project in others:  # each a campaign of its own: its pool queued, none of it labeled
        assert Solution.objects.filter(project=project).count() == 30
        assert QueueItem.objects.filter(project=project, status=QueueItem.Status.AVAILABLE).exists()
    labeled = Annotation.objects.filter(annotator__username__startswith="bench-http-")
    assert labeled.exists() and not labeled.exclude(project__slug="default").exists()
    # Made once: a second run finds them there.
    again = io.StringIO()
    bench.call("bench_http", pool=40, clients="1", seconds=1, site_projects=2, site_solutions=60, stdout=again)
    assert "built in" not in again.getvalue().split("the site:")[1].splitlines()[0]


def test_the_gold_items_and_screening_set_are_made_once_however_the_pool_grows():
    WorkspaceBench().build_pool(40)
    bench_http._gold_and_screening()
    first = set(Solution.objects.filter(is_gold=True).values_list("pk", flat=True))
    WorkspaceBench().build_pool(60)
    bench_http._gold_and_screening()
    assert set(Solution.objects.filter(is_gold=True).values_list("pk", flat=True)) == first
    assert len(first) == bench_http.GOLD_ITEMS
    assert len(quality.screening_solution_ids()) == bench_http.SCREENING_ITEMS
    assert quality.screening_solution_ids() <= first


def test_refuses_a_database_with_real_solutions():
    SolutionFactory()
    with pytest.raises(CommandError, match="scratch database"):
        bench.call("bench_http", pool=10, clients="1", seconds=1, stdout=io.StringIO())


def test_label_studio_runs_only_beside_the_server_this_command_starts():
    with pytest.raises(CommandError, match="--label-studio compares the two servers"):
        bench.call("bench_http", pool=10, in_process=1, label_studio="/nowhere", stdout=io.StringIO())


def test_side_by_side_divides_the_peers_server_and_database_cpu_per_task_by_stepwises():
    def run(tasks: int, server_s: float, database_s: float, clients_s: float) -> loadtest.Measured:
        client = loadtest.ClientResult(submitted=list(range(tasks)), cpu_s=clients_s)
        return loadtest.Measured([client], elapsed=10.0, server_s=server_s, database_s=database_s)

    # Stepwise: 100 tasks for 1.5 s + 0.5 s (20 ms a task); the peer: 20 tasks for 3 s + 1 s (200 ms).
    lines = label_studio.side_by_side(run(100, 1.5, 0.5, 0.4), run(20, 3.0, 1.0, 0.1), clients=10)
    text = "\n".join(lines)

    assert "10 clients: server + database CPU per labeled task: Stepwise 20.0 ms, Label Studio 200.0 ms " \
           "(10.0x Stepwise's)" in text, text
    assert "labeled tasks/s: Stepwise 10.00, Label Studio 2.00" in text, text
    # The clients' CPU is apart: counted in neither server's figure.
    assert "counted in neither: Stepwise's 4.0 ms, Label Studio's 5.0 ms" in text, text
    unmeasured = run(20, 3.0, 1.0, 0.1)
    unmeasured.server_s = None
    assert "Label Studio n/a (n/a)" in "\n".join(label_studio.side_by_side(run(1, 1, 1, 1), unmeasured, clients=1))


def test_in_process_mode_prints_the_cost_of_each_request_of_the_workflow():
    out = io.StringIO()
    bench.call("bench_http", pool=20, in_process=3, stdout=out)
    report = out.getvalue()

    # One claim, then per task its 4 ratings and the submit that answers with the next task: 16 / 3.
    assert re.search(r"per labeled task \(3\): 5\.3 requests, [\d.]+ SQL statements, [\d.]+ ms", report), report
    for endpoint in ("claim POST", "rating save", "submit \\+ next task"):
        assert re.search(rf"^\s+{endpoint}\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d,]+$", report, re.MULTILINE), report
    assert Annotation.objects.submitted().filter(annotator__username__startswith="bench-http-").count() == 3


@pytest.mark.postgresql
def test_compared_paths_each_label_every_other_task_and_print_their_cpu_per_request():
    out = io.StringIO()
    bench.call("bench_http", pool=20, in_process=4, compare_paths=True, stdout=out)
    report = out.getvalue()

    assert re.search(r"PostgreSQL's backend: [\d.]+ ms of CPU per labeled task", report), report
    cost = r"[\d.]+ \+ [\d.]+ = [\d.]+ ms"
    for endpoint in ("rating save", "submit \\+ next task"):
        assert re.search(rf"^  {endpoint}\s+{cost}\s+{cost}\s+[\d.]+$", report, re.MULTILINE), report
    labeled = Annotation.objects.submitted().filter(annotator__username__startswith="bench-http-")
    assert labeled.count() == 4  # two through each path, every step rated +1 and chosen
    assert {(c.rating, label.chosen_completion) for a in labeled for label in a.step_labels.all()
            for c in label.completions.all()} == {(1, 0)}


def test_the_profile_splits_each_requests_cpu_by_layer_and_the_shares_add_up():
    out = io.StringIO()
    bench.call("bench_http", pool=20, in_process=2, profile=True, stdout=out)
    rows = re.findall(r"^  (\S.*?)\s{2,}(\d+)% +(\d+)% +(\d+)% *$", out.getvalue(), re.MULTILINE)

    assert {name for name, *_ in rows} >= {"SQL (psycopg, Django's database layer)", "templates (Jinja2)",
                                          "Stepwise's labeling code"}, out.getvalue()
    for column in (1, 2, 3):  # each endpoint's shares: rounded, so within a few points of 100
        assert 95 <= sum(int(row[column]) for row in rows) <= 105, out.getvalue()
    sql = next(row for row in rows if row[0].startswith("SQL"))
    assert int(sql[2]) > 0  # a rating save writes, so the database layer is never free


def test_a_request_without_an_answer_is_counted_with_its_reason():
    nobody = loadtest.Annotator(f"http://127.0.0.1:{loadtest.free_port()}", "u", "p", deadline=float("inf"),
                                max_requests=5)
    with pytest.raises(loadtest._NoAnswer):
        nobody._send("GET", "/label/")
    assert nobody.result.statuses[0] == 1
    assert nobody.result.no_answers[0].startswith("GET /label/: ConnectionRefusedError")


class _Site(http.server.BaseHTTPRequestHandler):
    """Sets a cookie, deletes it as Django does, echoes the cookies sent; closes every
    connection after its answer without saying so, as a server whose keep-alive ran out."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        cookies = {"/set": "csrftoken=abc; Path=/", "/delete": 'csrftoken=""; Max-Age=0; Path=/'}
        body = (self.headers.get("Cookie") or "").encode()
        self.send_response(200)
        if self.path in cookies:
            self.send_header("Set-Cookie", cookies[self.path])
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def do_POST(self):
        """Echoes the body's type and the body."""
        body = self.headers["Content-Type"].encode() + b" " + self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, *args):
        pass


def test_a_client_connection_keeps_cookies_and_reconnects_when_the_server_closed_it():
    """Whether the server's close is seen before the next request (after a pause) or only as
    that request goes out (back to back), the request is answered on a new connection."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tab = loadtest.Connection(f"http://127.0.0.1:{server.server_port}")
        assert tab.request("GET", "/set").status_code == 200 and tab.cookies == {"csrftoken": "abc"}
        for _ in range(20):
            assert tab.request("GET", "/echo").text == "csrftoken=abc"
        time.sleep(0.2)
        assert tab.request("GET", "/echo").text == "csrftoken=abc"
        tab.request("GET", "/delete")
        assert tab.cookies == {} and tab.request("GET", "/echo").text == ""
    finally:
        server.shutdown()


def test_a_client_connection_sends_forms_url_encoded_and_json_as_json_on_a_new_connection_too():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tab = loadtest.Connection(f"http://127.0.0.1:{server.server_port}")
        assert tab.request("POST", "/", form={"index": 2, "rating": -1}).text == \
            "application/x-www-form-urlencoded index=2&rating=-1"
        for _ in range(5):  # Back to back: the server closed each connection after its answer.
            assert tab.request("POST", "/", json_body={"result": [1, "+1"]}).text == \
                'application/json {"result": [1, "+1"]}'
    finally:
        server.shutdown()
