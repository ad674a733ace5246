from django.apps import AppConfig


class ScoringConfig(AppConfig):
    name = "scoring"
    verbose_name = "Scoring"

    def ready(self) -> None:
        # The labeling side shows the current model's view of a task, read from where this app
        # stores its scores; it may not import this app, so the query is handed to it here.
        from django.conf import settings

        from annotate.labeling import assistance
        from scoring.rescoring import scores, selection

        assistance.read_model_view_with(scores.current_step_ps)
        # The settings parse the shares' numbers; the reasons they name are this app's.
        selection.check_shares_setting(settings.STEPWISE_SELECTION_SHARES)
