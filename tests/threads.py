"""Work run in threads of their own, each with its own database connection, as concurrent clients are."""
import threading

from django.db import connections


def run_threads(works):
    """Run each of `works` in a thread of its own with its own connection; fail on any error."""
    errors = []

    def run(work):
        try:
            work()
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(work,)) for work in works]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
