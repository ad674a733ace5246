"""The login backend: Django's ModelBackend, with the per-request user read memoized.

Every request turns the session's user id into a user (one SELECT on auth_user). On the
labeling hot path that read cost as much as the rating's own write, so the user comes from a
process memo (infra/memo.py) while it is unchanged: a save or delete of a user (a deactivation,
a new password) is seen by every process at its next request (settings.STEPWISE_MEMOIZED_MODELS).
Django's session check compares the password hash of the user it is given, and an inactive user
gets none. A logout is immediate everywhere too: it deletes the session.

The API's token check is DRF's, with wrong tokens limited per client address
(``LimitedTokenAuthentication``).
"""
from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed, Throttled

from infra import throttling
from infra.client_address import client_address
from infra.memo import ProcessMemo

# For changes no signal reports (QuerySet.update(), SQL), a user is read again after this long.
USER_MEMO_SECONDS = 10.0
_users: ProcessMemo = ProcessMemo(seconds=USER_MEMO_SECONDS)


class MemoizedModelBackend(ModelBackend):
    def get_user(self, user_id):
        return _users.get(str(user_id), lambda: super(MemoizedModelBackend, self).get_user(user_id))


BAD_TOKEN_SECONDS = 600  # the window STEPWISE_BAD_TOKEN_LIMIT counts in


class LimitedTokenAuthentication(TokenAuthentication):
    """``Authorization: Token ...``, where an address past ``STEPWISE_BAD_TOKEN_LIMIT`` wrong tokens
    in ``BAD_TOKEN_SECONDS`` gets 429 with Retry-After for each further wrong one, not 401. Only
    wrong tokens are counted, after the lookup every request makes anyway: a good token costs
    nothing more and is never refused, even from an address a scanner shares."""

    def authenticate(self, request):
        try:
            return super().authenticate(request)
        except AuthenticationFailed:
            rate = (settings.STEPWISE_BAD_TOKEN_LIMIT, BAD_TOKEN_SECONDS)
            # Closed: while wrong tokens cannot be counted, each one is refused (good tokens never are).
            verdict = throttling.check("bad-token", client_address(request), rate, fail_open=False)
            if not verdict.allowed:
                raise Throttled(wait=verdict.retry_after) from None
            raise
