"""Schemathesis against our own OpenAPI schema, through the WSGI app, as an admin: every
operation gets generated requests (valid and not), and none may end in a server error."""
import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token

from bench.tiny import build_tiny_prm
from scoring.store import registry
from tests.annotations import annotate
from tests.factories import SolutionFactory

# ~25 operations x 15 examples: about a minute on two cores.
EXAMPLES = 15


@pytest.fixture(scope="session")
def tiny_prm_folder(tmp_path_factory):
    return build_tiny_prm(tmp_path_factory.mktemp("fuzz") / "tiny", kind="head", head_type="beta")


@pytest.fixture
def admin_token(admin_user, tiny_prm_folder, settings):
    """An admin's token, over a small pool with labels and a current model to score with."""
    settings.STEPWISE_SCORING_DTYPE = "float32"
    # No ml worker runs here (this test's transaction is invisible to one), so a valid
    # /api/score request gets the documented 503 at once; scoring itself is tested with a
    # real worker in test_score_endpoint.py.
    settings.STEPWISE_SCORE_API_TIMEOUT = 0.2
    settings.STEPWISE_SEARCH_API_TIMEOUT = 0.2  # the same for /api/search (test_search_api.py has a worker)
    registry.forget_loaded()
    registry.register_model_version(name="tiny", path=tiny_prm_folder, make_current=True)
    for ratings in ([1, 1, 1], [1, 0, -1], [-1]):
        annotate(SolutionFactory(), ratings, annotator=admin_user)
    return Token.objects.create(user=admin_user).key


@pytest.fixture
def wsgi_app():
    """Django's WSGI app, keeping the test's database connection (and its transaction) open
    across requests, as Django's own test client does."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield WSGIHandler()
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@pytest.fixture
def api_schema(admin_token, wsgi_app):
    return schemathesis.openapi.from_wsgi(
        "/api/schema/?format=json", wsgi_app, headers={"Authorization": f"Token {admin_token}"}
    )


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.mark.django_db
def test_schema_needs_a_login(client, admin_user):
    assert client.get("/api/schema/").status_code in {401, 403}
    client.force_login(admin_user)
    assert client.get("/api/schema/").status_code == 200
    docs = client.get("/api/docs/")
    assert docs.status_code == 200 and b"swagger-ui" in docs.content
    # Swagger UI ships with the app: its script comes from our static files, not a CDN.
    assert b'src="/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"' in docs.content
    assert b"cdn" not in docs.content


@pytest.mark.django_db
def test_schema_generates_without_warnings_and_validates(tmp_path):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    text = (tmp_path / "schema.yaml").read_text()
    assert "/api/score:" in text and "curl -X POST" in text


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@pytest.mark.slow
def test_no_generated_request_causes_a_server_error(case, admin_token):
    response = case.call(headers={"Authorization": f"Token {admin_token}"})
    waits_for = {"/api/score": "no scoring worker answered", "/api/search": "no search worker answered"}
    if case.formatted_path in waits_for and response.status_code == 503:
        assert waits_for[case.formatted_path] in response.text, response.text[:3000]
        return
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}\n{response.text[:3000]}"
    )
