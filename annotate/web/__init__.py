"""The labeling side's pages and REST API: thin views by page (home, labeling, review, quality,
pool, exports), their htmx partials, request parsing (`params`), and `api/`.
"""
