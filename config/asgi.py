"""The web entry point: `uvicorn config.asgi:application` (`./stepwise run`, docker-compose).

Django's WSGI application behind infra.web_front, which reads each request whole on the event
loop before a bounded pool of threads runs Django (slow clients hold sockets, never threads).
"""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from infra.web_front import front_for_settings  # noqa: E402 (the settings module is named first)

application = front_for_settings()
