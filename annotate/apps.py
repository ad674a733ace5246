from django.apps import AppConfig
from django.conf import settings

from steps import grading


class AnnotateConfig(AppConfig):
    name = "annotate"
    verbose_name = "Labeling"

    def ready(self) -> None:
        # The Django-free text core reads no settings: the app hands it the one it needs.
        grading.set_default_timeout(settings.STEPWISE_GRADING_TIMEOUT)
