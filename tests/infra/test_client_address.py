"""The client address (infra/client_address.py): X-Forwarded-For is believed only from a trusted
proxy, and login lockout and the API's throttles count by the same address."""
import uuid
from ipaddress import ip_network

import pytest
from axes.models import AccessAttempt
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, RequestFactory
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from infra import throttling
from infra.client_address import client_address
from infra.env import env_networks
from tests.factories import user_with_role

PASSWORD = "pass-for-tests"


@pytest.fixture
def behind_proxies(settings):
    settings.STEPWISE_TRUSTED_PROXIES = (ip_network("10.0.0.0/8"), ip_network("fd00::1"))


def address(remote: str, forwarded: str | None = None) -> str:
    headers = {"REMOTE_ADDR": remote} | ({"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {})
    return client_address(RequestFactory().get("/", **headers))


def test_without_trusted_proxies_the_socket_address_is_the_client():
    assert address("203.0.113.5", "198.51.100.1") == "203.0.113.5"


def test_a_forwarded_for_from_an_untrusted_peer_is_ignored(behind_proxies):
    assert address("203.0.113.5", "10.0.0.1, 198.51.100.1") == "203.0.113.5"


def test_from_a_trusted_proxy_the_right_most_untrusted_address_is_the_client(behind_proxies):
    # The client wrote the first two (forged); our two proxies appended 198.51.100.7 and 10.0.0.3.
    assert address("10.0.0.2", "1.2.3.4, 10.9.9.9, 198.51.100.7, 10.0.0.3") == "198.51.100.7"
    assert address("fd00::1", "2001:db8::7") == "2001:db8::7"
    assert address("10.0.0.2", "10.0.0.3") == "10.0.0.3"  # only proxies: the farthest one
    assert address("10.0.0.2") == "10.0.0.2"  # no header: the proxy itself
    # Garbage where an address belongs: no further than the proxy that passed it on.
    assert address("10.0.0.2", "198.51.100.7, not-an-address, 10.0.0.3") == "10.0.0.3"


def test_the_api_throttles_count_an_anonymous_client_by_that_address(behind_proxies):
    class Throttle(throttling.UserRate):
        scope = f"test-{uuid.uuid4().hex}"

        def rate(self) -> str:
            return "1/hour"

    def allowed(remote: str, forwarded: str) -> bool:
        request = Request(APIRequestFactory().get("/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded))
        return Throttle().allow_request(request, None)

    assert allowed("203.0.113.5", "1.1.1.1")
    assert not allowed("203.0.113.5", "2.2.2.2")  # a new forged header is the same client
    assert allowed("10.0.0.2", "198.51.100.7")
    assert not allowed("10.0.0.3", "9.9.9.9, 198.51.100.7")  # another proxy, the same client
    assert allowed("10.0.0.2", "198.51.100.8")


def post_login(client: Client, remote: str, forwarded: str, password: str = "wrong"):
    return client.post("/accounts/login/", {"username": "kim", "password": password},
                       REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded)


@pytest.mark.django_db
def test_a_spoofed_forwarded_for_does_not_escape_the_login_lockout(behind_proxies, settings):
    user_with_role("kim", "annotator")
    for n in range(settings.AXES_FAILURE_LIMIT):
        post_login(Client(), "203.0.113.5", f"198.51.100.{n}")
    assert post_login(Client(), "203.0.113.5", "198.51.100.200", PASSWORD).status_code == 429
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"203.0.113.5"}


@pytest.mark.django_db
def test_behind_a_trusted_proxy_the_lockout_counts_each_client_apart(behind_proxies, settings):
    user_with_role("kim", "annotator")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        post_login(Client(), "10.0.0.2", "198.51.100.7")
    assert post_login(Client(), "10.0.0.2", "198.51.100.7", PASSWORD).status_code == 429
    assert post_login(Client(), "10.0.0.2", "198.51.100.8", PASSWORD).status_code == 302
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"198.51.100.7"}


@pytest.mark.parametrize("value", ["10.0.0.0/33", "proxy.example.org"])
def test_a_trusted_proxy_that_is_not_an_address_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv("STEPWISE_TRUSTED_PROXIES", f"10.0.0.1, {value}")
    with pytest.raises(ImproperlyConfigured, match="STEPWISE_TRUSTED_PROXIES"):
        env_networks("STEPWISE_TRUSTED_PROXIES")
