"""docker-compose's front, deploy/nginx.conf, served by Debian's nginx in front of the web server
as `./stepwise run` starts it, with only its addresses and paths changed: `nginx -t` passes, and
the attacks of tests/infra/attacks.py meet nginx's limits while annotators log in and label, and
a browser logs in and labels through it.

Without nginx these tests are skipped, which under CI=true fails the run (tests/ci.py);
`./stepwise test` installs Debian's nginx where it can (install_nginx).
"""
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from annotate.models import Step
from bench.loadtest import _children, free_port
from tests.browser.test_labeling_browser import log_in, start_labeling, wait_rating
from tests.infra import attacks
from tests.infra.attacks import PASSWORD, Target
from tests.infra.test_web_server import PROBES, assert_site_held

ROOT = Path(__file__).resolve().parent.parent.parent
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
HEADER_TIMEOUT = 10  # client_header_timeout in deploy/nginx.conf


def config_for(web_port: int, port: int, folder: Path) -> Path:
    """deploy/nginx.conf with the app at 127.0.0.1:`web_port`, nginx on 127.0.0.1:`port` and its
    pid and temporary files in `folder`; nothing else changed."""
    text = (ROOT / "deploy" / "nginx.conf").read_text()
    temp_paths = "".join(f"    {kind}_temp_path {folder / kind};\n"
                         for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    for old, new in [("server web:8000;", f"server 127.0.0.1:{web_port};"),
                     ("listen 8000;", f"listen 127.0.0.1:{port};"),
                     ("pid /tmp/nginx.pid;", f"pid {folder / 'nginx.pid'};"),
                     ("http {", "http {\n" + temp_paths)]:
        assert old in text, f"deploy/nginx.conf no longer has {old!r}"
        text = text.replace(old, new, 1)
    config = folder / "nginx.conf"
    config.write_text(text)
    return config


def nginx_command(config: Path, folder: Path, *args: str) -> list[str]:
    # As root, nginx's workers would run as `nobody`, who cannot write to the test's folder.
    directives = "daemon off;" + (" user root;" if os.geteuid() == 0 else "")
    return [NGINX, "-p", str(folder), "-e", "stderr", "-c", str(config), "-g", directives, *args]


@pytest.fixture
def nginx_front(web_server, tmp_path):
    """Debian's nginx serving deploy/nginx.conf in front of the test's web server."""
    if NGINX is None:
        pytest.skip("no nginx (apt-get install nginx; under CI=true this fails the run)")
    server, _ = web_server
    folder = tmp_path / "nginx"
    folder.mkdir()
    port = free_port()
    config = config_for(server.port, port, folder)
    log = (tmp_path / "nginx.log").open("ab")
    process = subprocess.Popen(nginx_command(config, folder), stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not (folder / "nginx.pid").exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process.poll() is None, (tmp_path / "nginx.log").read_text()

        def pids() -> list[int]:
            return [*server.pids(), process.pid, *_children(process.pid)]

        yield Target(port=port, pids=pids, temp_dirs=[folder, tmp_path / "tmp"], idle_timeout=HEADER_TIMEOUT)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


@pytest.mark.skipif(NGINX is None, reason="no nginx (apt-get install nginx; under CI=true this fails the run)")
def test_the_compose_nginx_config_passes_nginx_t(tmp_path):
    checked = subprocess.run(nginx_command(config_for(8000, free_port(), tmp_path), tmp_path, "-t"),
                             capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.slow
@pytest.mark.postgresql
@pytest.mark.parametrize("probe", list(PROBES))
def test_the_site_behind_nginx_holds_under_each_attack_with_users_beside_it(nginx_front, web_server,
                                                                           work_to_claim, probe):
    attack, _, expected = PROBES[probe]
    outcome = attacks.beside_real_users(nginx_front, work_to_claim, attack)
    print(f"\n{probe}, through nginx: {outcome}")
    assert_site_held(outcome, expected, web_server[1])


@pytest.mark.slow
@pytest.mark.postgresql
def test_nginx_keeps_the_port_in_host_and_takes_uploads_only_where_they_go(nginx_front, work_to_claim):
    # A browser's POST on a port of its own passes Django's Origin check: Host kept its port.
    status = attacks.form_login(nginx_front, "chunky", PASSWORD, {})
    assert status == 302
    # 20 MiB declared: refused on the login page at once; on the import URL nginx waits for the
    # body (no answer yet), to pass it on whole.
    for path, expected in [("/accounts/login/", 413), ("/imports/", None)]:
        sock = nginx_front.connect()
        try:
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {nginx_front.netloc}\r\nContent-Type: multipart/form-data; "
                         f"boundary=x\r\nContent-Length: {20 * 2**20}\r\n\r\n".encode())
            assert attacks.status_of(sock, timeout=2) == expected, path
        finally:
            sock.close()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.postgresql
def test_a_browser_logs_in_and_labels_through_the_compose_nginx(nginx_front, work_to_claim, new_page):  # noqa: F811
    page = new_page()
    # The login form's POST passes Django's Origin check: nginx passed Host on with its port.
    log_in(page, nginx_front, "chunky")
    task = start_labeling(page, nginx_front)
    steps = Step.objects.filter(solution=task.solution).count()
    for _ in range(steps):
        page.keyboard.press("3")
    wait_rating(page, steps - 1, 1)
    page.keyboard.press("Enter")  # submit, and on to the next task
    page.wait_for_url(lambda url: "/label/" in url and url != f"{nginx_front.url}/label/{task.pk}/")
    task.refresh_from_db()
    assert task.status == "submitted" and task.finish_reason == "solution"
