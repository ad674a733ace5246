"""The tables a benchmark runs on, vacuumed before it measures (PostgreSQL)."""
from django.db import connection


def vacuum(*models) -> None:
    """VACUUM (ANALYZE) the models' tables on PostgreSQL; nothing on SQLite. Where autovacuum is
    off (as on this project's CI machines) the dead rows earlier runs left behind stay, and every
    scan of those tables in the run would wade through them: the figures would measure the
    benchmark's history, not the code."""
    if connection.vendor != "postgresql":
        return
    tables = ", ".join(connection.ops.quote_name(model._meta.db_table) for model in models)
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (ANALYZE) {tables}")
