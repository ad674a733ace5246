"""The login backend: Django's ModelBackend, with the per-request user read memoized.

Every request turns the session's user id into a user (one SELECT on auth_user). On the
labeling hot path that read cost as much as the rating's own write, so the user comes from a
process memo (infra/memo.py) while it is unchanged: a save or delete of a user (a deactivation,
a new password) is seen by every process at its next request (settings.STEPWISE_MEMOIZED_MODELS).
Django's session check compares the password hash of the user it is given, and an inactive user
gets none. A logout is immediate everywhere too: it deletes the session.
"""
from django.contrib.auth.backends import ModelBackend

from infra.memo import ProcessMemo

# For changes no signal reports (QuerySet.update(), SQL), a user is read again after this long.
USER_MEMO_SECONDS = 10.0
_users: ProcessMemo = ProcessMemo(seconds=USER_MEMO_SECONDS)


class MemoizedModelBackend(ModelBackend):
    def get_user(self, user_id):
        return _users.get(str(user_id), lambda: super(MemoizedModelBackend, self).get_user(user_id))
