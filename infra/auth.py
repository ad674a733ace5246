"""The login backend: Django's ModelBackend, with the per-request user read memoized.

Every request turns the session's user id into a user (one SELECT on auth_user). On the
labeling hot path that read cost as much as the rating's own write, so the user comes from a
process memo (infra/memo.py) for USER_MEMO_SECONDS. A save or delete of the user in this
process forgets it at once; in another web process, deactivating a user or changing their
password takes effect within USER_MEMO_SECONDS (Django's session check compares the password
hash of the user it is given). A logout is immediate everywhere: it deletes the session.
"""
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from infra.memo import ProcessMemo

USER_MEMO_SECONDS = 10.0
_users: ProcessMemo = ProcessMemo(seconds=USER_MEMO_SECONDS)


class MemoizedModelBackend(ModelBackend):
    def get_user(self, user_id):
        return _users.get(str(user_id), lambda: super(MemoizedModelBackend, self).get_user(user_id))


@receiver(post_save, sender=get_user_model())
@receiver(post_delete, sender=get_user_model())
def _forget_changed_user(instance, **kwargs) -> None:
    _users.forget(str(instance.pk))
