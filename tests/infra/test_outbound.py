"""Outbound URLs: one check (infra.outbound) before a server address is stored or called, and no
client follows a redirect, so no key reaches a server nobody checked."""
from __future__ import annotations

import socket
import threading
import time

import openai
import pytest
from django.core.management import CommandError, call_command

from infra.outbound import check_url
from scoring.generation.generators import SamplingParams, check_spec
from scoring.generation.openai_generator import OpenAIGenerator
from scoring.models import GenerationRun, ModelVersion
from scoring.store.remote_scorer import RemoteConfig, RemotePRM, RemoteScoringError
from stepwise_client import StepwiseClient, StepwiseError
from tests.stepwise_client.scripted_server import ScriptedServer

REFUSED = [
    ("ftp://gpu-1/v1", "only http:// and https://"),
    ("file:///etc/passwd", "only http:// and https://"),
    ("127.0.0.1:8000/v1", "only http:// and https://"),
    ("http://user:secret@gpu-1:8000", "no user or password"),
    ("http:///v1", "names no host"),
    ("http://gpu-1:99999/v1", "the port"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://169.254.170.2/v2/credentials", "link-local"),  # ECS task credentials
    ("http://[fe80::1%25eth0]:8000/", "link-local"),
    ("http://[::ffff:169.254.169.254]/", "link-local"),
    ("http://2852039166/", "link-local"),  # 169.254.169.254 as one number
    ("http://0xa9.0xfe.0xa9.0xfe/", "link-local"),
    ("http://[fd00:ec2::254]/", "cloud metadata address"),
    ("http://100.100.100.200/", "cloud metadata address"),
    ("http://metadata.google.internal/computeMetadata/v1/", "cloud metadata service"),
    ("http://METADATA.google.internal./", "cloud metadata service"),
]


@pytest.mark.parametrize(("url", "problem"), REFUSED)
def test_a_url_outside_http_or_at_a_link_local_or_metadata_address_is_refused_naming_why(url, problem):
    with pytest.raises(ValueError, match=problem):
        check_url(url, allow=())


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "https://api.openai.com/v1", "http://[::1]:8000",
                                 "http://10.0.0.5:8000", "HTTPS://gpu-1.internal:8443/v1/"])
def test_a_server_on_loopback_a_private_network_or_the_internet_passes_unchanged(url):
    assert check_url(url, allow=()) == url


def test_a_name_that_resolves_to_a_link_local_address_is_refused(monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", 0)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 0)),
    ])
    with pytest.raises(ValueError, match=r"link-local address \(169.254.169.254\)"):
        check_url("http://rebound.example:8000", allow=())


def test_the_setting_allows_a_listed_host_and_no_other(settings):
    settings.STEPWISE_OUTBOUND_ALLOW = ["169.254.169.254", "metadata.google.internal"]
    assert check_url("http://169.254.169.254/x") == "http://169.254.169.254/x"
    assert check_url("http://Metadata.Google.Internal/")
    with pytest.raises(ValueError, match="STEPWISE_OUTBOUND_ALLOW"):
        check_url("http://169.254.1.1/")
    with pytest.raises(ValueError, match="only http"):
        check_url("ftp://169.254.169.254/")  # the list exempts an address, never a scheme


def test_generator_specs_and_remote_configs_are_checked_where_they_are_made(settings):
    with pytest.raises(ValueError, match="base_url: .*link-local"):
        check_spec({"backend": "openai", "base_url": "http://169.254.169.254/v1", "model": "m"})
    with pytest.raises(ValueError, match="'url': .*only http"):
        RemoteConfig.from_dict({"url": "file:///etc/passwd", "served_model": "m", "separator": "\n"})
    with pytest.raises(CommandError, match="remote model config: 'url': .*cloud metadata"):
        call_command("register_remote_model", "prm", "http://metadata.google.internal", "--separator", "\n")
    settings.STEPWISE_OUTBOUND_ALLOW = ["169.254.169.254"]
    assert check_spec({"backend": "openai", "base_url": "http://169.254.169.254/v1", "model": "m"})


@pytest.mark.django_db
def test_a_stored_remote_version_whose_host_is_no_longer_allowed_is_not_called(settings):
    from scoring.store import registry
    from scoring.store.registry import ModelIntegrityError

    settings.STEPWISE_OUTBOUND_ALLOW = ["169.254.10.10"]
    version = registry.register_remote_version(
        name="prm", config={"url": "http://169.254.10.10:8000", "served_model": "m", "separator": "\n"})
    settings.STEPWISE_OUTBOUND_ALLOW = []
    with pytest.raises(ModelIntegrityError, match="link-local"):
        registry._remote_client(ModelVersion.objects.get(pk=version.pk))


def test_the_generation_form_names_a_refused_base_url_on_its_field(client, admin_user):
    client.force_login(admin_user)
    form = {"source": "s", "samples_per_problem": 2, "backend": "openai", "model": "m", "mode": "completions",
            "base_url": "http://169.254.169.254/v1", "temperature": 0.7, "max_tokens": 32,
            "prompt_template": "{problem}"}
    response = client.post("/models/generation/", form)
    assert response.status_code == 200 and "link-local" in response.context["form"].errors["base_url"][0]
    assert not GenerationRun.objects.exists()


# Each client, with a key, at `url`; the redirect it gets must go nowhere.
def reward_client(url: str, monkeypatch) -> None:
    StepwiseClient(url, "the-token", retries=2, backoff=0).score([("What is 2 + 3?", ["2 + 3 = 5."])])


def remote_scorer(url: str, monkeypatch) -> None:
    monkeypatch.setenv("POOLING_KEY", "the-token")
    config = RemoteConfig(url=url, served_model="m", separator="\n\n", api_key_env="POOLING_KEY", retries=2,
                          backoff=0)
    RemotePRM(config).step_probabilities([("What is 2 + 3?", ["2 + 3 = 5."])])


def openai_generator(url: str, monkeypatch) -> None:
    monkeypatch.setenv("GENERATOR_KEY", "the-token")
    generator = OpenAIGenerator(f"{url}/v1", "m", api_key_env="GENERATOR_KEY", max_retries=2, backoff_seconds=0,
                                concurrency=1)
    generator.generate(["What is 2 + 3?"], SamplingParams(max_tokens=2))


FAILS = {reward_client: StepwiseError, remote_scorer: RemoteScoringError, openai_generator: openai.APIStatusError}
PATHS = {reward_client: "/api/score", remote_scorer: "/pooling", openai_generator: "/v1/completions"}


@pytest.mark.parametrize("consumer", FAILS)
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_no_client_follows_a_redirect_so_its_key_never_reaches_another_origin(consumer, status, monkeypatch):
    with ScriptedServer([]) as elsewhere:
        target = f"{elsewhere.url}{PATHS[consumer]}"
        with ScriptedServer([(status, {"Location": target})] * 3) as server, pytest.raises(FAILS[consumer]) as failed:
            consumer(server.url, monkeypatch)
    assert elsewhere.requests == 0 and elsewhere.headers == []
    assert server.requests == 1  # a redirect is an answer, not a failure to retry
    sent = {name.lower(): value for name, value in server.headers[0].items()}
    assert "the-token" in sent["authorization"]  # the key went to the checked server only
    assert str(status) in str(failed.value) and f"a redirect to {target}" in str(failed.value)


class Misbehaving:
    """A raw HTTP server on loopback that answers every request with a 200 whose body comes
    `chunk` bytes at a time, `pause` seconds apart, `total` bytes in all (as Content-Length says)."""

    def __init__(self, *, chunk: int, pause: float, total: int):
        self.chunk, self.pause, self.total = chunk, pause, total
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % self.total)
            sent = 0
            try:
                while sent < self.total and not self.stop.is_set():
                    conn.sendall(b" " * self.chunk)
                    sent += self.chunk
                    time.sleep(self.pause)
            except OSError:
                pass  # the client gave up: what the test wants

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.listener.close()


def test_a_generator_answer_that_never_ends_or_never_stops_growing_is_cut_off():
    prompt, params = ["What is 2 + 3?"], SamplingParams(n=1, max_tokens=8)
    # A byte every 0.1 s: each read is quick, so only a total deadline ends it.
    with Misbehaving(chunk=1, pause=0.1, total=10_000) as slow:
        generator = OpenAIGenerator(slow.url, "m", timeout=1.0, max_retries=0)
        started = time.monotonic()
        with pytest.raises(openai.APIConnectionError):
            generator.generate(prompt, params)
        assert time.monotonic() - started < 5
    # 64 MB as fast as it goes: read no further than the cap.
    with Misbehaving(chunk=1 << 20, pause=0, total=64 << 20) as flood:
        generator = OpenAIGenerator(flood.url, "m", timeout=30.0, max_retries=0)
        with pytest.raises(openai.APIConnectionError):
            generator.generate(prompt, params)
