"""What a labeling action refuses, each with a message that says why: the views answer a
`LabelingError` (the input or the task's state does not allow it) with 400 and a `Conflict`
(the task changed under the page: submitted, or its lease went to someone else) with 409."""


class LabelingError(ValueError):
    """An action that the task's state or the input does not allow; the message says why."""


class Conflict(Exception):
    """The task is no longer open to this change; the page is out of date."""


class AlreadySubmitted(Conflict):
    """A change to a submitted annotation."""


class LeaseLost(Conflict):
    """The task's lease lapsed and its item went to someone else."""
