"""The ground floor the apps share: environment parsing (`env`), limits, throttling, the raw
statements of the labeling fast path (`statements`), the process memo, the login backend, the
Redis cache and the PostgreSQL backend. It imports no app.

`charts` draws every chart (SVG) for the pages, eval_search and the benchmarks.
"""
