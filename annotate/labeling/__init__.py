"""Labeling: an annotator claims a task, rates its steps in order and submits it; quality
control and reviewers read what was labeled.

The fast path (claim, rate, submit, a page a request) asks a reader to hold five things:

1. **The task** (`tasks`): an annotation's steps with their ratings and states, built from its
   rows by the rules of rating in order and stopping at the first error, and how it can be
   submitted as it stands. Every labeling page shows one; every action answers with one.
2. **The annotation's rows** (`rows`): `annotation_for(user=..., pk=...)` is the one way to an
   annotator's task; `read` gives it for the page, `change` for an action: locked in one
   statement that checks the owner, refuses a submitted task and keeps the lease, and whose
   writes are made together when the action ends, `updated_at` with them.
3. **Statements** (`infra.statements`): the one way below the ORM, for the few reads and writes a
   request makes: built once per connection, rows as NamedTuples, writes by primary key that keep
   every auto_now field true.
4. **The lease** (`queueing` claims, `queue_items` keeps): ordinary work is a queue item leased
   to one annotator, kept by their activity, done when they submit.
5. **Refusals** (`refusals`): a `LabelingError` (400) or a `Conflict` (409), each saying why.

The settings, the user and their roles come from memos (infra.memo) that any change makes every
process read again at its next request, so a reader can take them as read from the database.

Modules: `actions` (rate, flag, undo, write a step, submit), `timing` (active time, heartbeats),
`queueing` (generations, enqueueing, claims), `queue_items` (an item's lease and states after
it), `quality` (gold, screening, agreement), `verdicts` (which rating counts), `assistance`
(what an assisted project shows of the model's view, read with the query scoring gives it, and
what each rating keeps of it), `reviewing`, `roles`, `members` (a project's members changed by its
admins, each change recorded). Imports run one way: actions → tasks → assistance, timing → rows
→ queue_items → refusals, models and infra; queueing → quality → queue_items, verdicts.
"""
