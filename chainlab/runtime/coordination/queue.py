"""Runs that wait in a queue for the worker fleet (DESIGN §19), the runtime's side of what
an enqueue checks: the queue's name and the run's resolved ``concurrency_key``. (The
claim and the limits are the store's, :mod:`chainlab.store.queue`; the worker that claims
is :mod:`.workers`.)"""

from __future__ import annotations

from chainlab.errors import PlanError, Problem
from chainlab.plan.refs import RefError, parse_template, walk_path
from chainlab.plan.schema import RunOptions
from chainlab.store.base import RunRecord
from chainlab.store.queue import check_queue_name

__all__ = ["concurrency_key", "queue_name"]


def queue_name(queue: object) -> str:
    """``queue`` when it is a simple identifier (:data:`chainlab.store.queue.QUEUE_NAME`).
    Raises PlanError naming the field ``queue``."""
    try:
        return check_queue_name(queue)
    except ValueError as exc:
        raise PlanError(Problem("invalid_field", str(exc), field="queue")) from None


def concurrency_key(options: RunOptions, record: RunRecord) -> str | None:
    """The run's concurrency key: ``options.concurrency_key`` rendered over its context
    (None without one). Raises PlanError when the context lacks what the key refers to."""
    template = options.concurrency_key
    if template is None:
        return None
    try:
        key = parse_template(template).render(
            lambda ref: walk_path(record.context, ref.path, ref.source))
    except RefError as exc:
        raise PlanError(Problem(
            "invalid_field", f"concurrency_key {template!r} does not resolve: {exc}; the "
            "context must have what it refers to", field="options.concurrency_key")) from None
    return key if isinstance(key, str) else str(key)
