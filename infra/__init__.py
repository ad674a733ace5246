"""The ground floor the apps share: environment parsing (`env`), limits, throttling, the raw
statements of the labeling fast path (`statements`), the process memo, the login backend, the
Redis cache and the PostgreSQL backend. It imports no app.

`charts` draws every chart (SVG) for the pages, eval_search and the benchmarks. `outbound`
checks a server URL an admin typed; `outbound_http` is the one client that calls such servers
(the generator, the remote scorer), that check built in.
"""
