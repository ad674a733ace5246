"""Background jobs, for both apps: the ground floor their job kinds build on.

- `states`: a job's states (`JobState`), the active and the finished ones.
- `holders`: who holds a claim ("host:pid"), whether that process is gone, and the heartbeat
  thread that keeps a held claim fresh.
- `models`: the abstract `Held` row (claimed with one guarded UPDATE, taken over once its
  holder is gone; jobs and rescore chunks alike), the one claim function both chunk kinds use,
  and the abstract `Job` (lifecycle, sending its task, finishing) whose concrete kinds register
  themselves as they are defined (`job_kinds()`).
- `recovery`: the reconciler, which walks the registered kinds and resends the task of every
  job that lost its broker message or its worker.
- `queues`: the worker queue of each kind, and what a pending job waits behind there.

Not a Django app: it owns no table and no migration. Its models are abstract; each concrete
job kind lives in the app that owns its table (`annotate`: imports, exports; `scoring`: rescores,
training and generation runs, rollout labeling), and those apps' migrations keep the tables as
they were. Imports: Django, Celery and the broker's errors; never `annotate`, `scoring` or
`infra` (import-linter's top-level layers hold it beside them on the ground floor).
"""
