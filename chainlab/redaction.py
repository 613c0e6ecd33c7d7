"""Redaction: what a run's values look like once they leave the running process (DESIGN §24).

``Runtime(redact=fn)`` and a tool's ``redact=fn`` are *redactors*: a function of one value
(a step's args, an output, an error message, a preview, a model's request or answer, a
person's note) returning the value as it may be stored, streamed, traced, exported or
shown, masked where it must be. Inside the process the model and the tools still see the
real values; everything that leaves it sees the redacted ones.

* :func:`redact_value` applies one redactor to one value: THE function every door calls (the
  event log through :func:`redact_payload`, a tracer's span attributes, a stored context).
  A redactor that raises, or returns a value that is not JSON, raises
  :class:`~chainlab.errors.RedactionError` naming the redactor, never the value: the value
  is not stored, and the step it belongs to fails.
* :func:`redact_payload` applies a step's redactors (its tool's, then the runtime's) to each
  value of an event's payload (not the structural keys: :data:`STRUCTURAL`), and marks the
  keys it changed under :data:`~chainlab.events.fold_state.REDACTED` (``"redacted":
  ["args"]``), so a reader knows a value is a mask and a resumed run knows it does not hold
  the real one (a step that needs it waits for a person: DESIGN §24).
* :func:`mask_pattern` and :func:`mask_keys` make the usual redactors: every match of a
  regular expression in every string, the values under some keys at any depth.

This module is applied by ``chainlab.runtime.engine.core.RunCore.emit`` (every event of
every kind, to every store and every subscriber) and by nothing else on the write path.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from chainlab._json import NotJSONError, to_json_value
from chainlab.errors import RedactionError
from chainlab.events.fold_state import REDACTED

__all__ = ["REDACTED", "STRUCTURAL", "Redactor", "mask_keys", "mask_pattern",
           "redact_payload", "redact_value", "redactor_name"]

#: a redactor: the value as it may leave the process (the value itself when nothing is to
#: be hidden); it must not change what it is given
Redactor = Callable[[Any], Any]

#: payload keys that hold chainlab's own identities and vocabulary, never a user's value:
#: no redactor sees them (a masked idempotency key or tool name would break the run)
STRUCTURAL = frozenset({
    "tool", "idempotency_key", "code", "args_hash", "request_hash", "error_kind", "kind",
    "ids", "turn", "attempt", "v", "delay_s", "due_at", "recovery", "epoch", REDACTED,
})


def redactor_name(redactor: Any) -> str:
    """How a redactor is named in an error (its qualified name, else its repr)."""
    name = getattr(redactor, "__qualname__", None) or getattr(redactor, "__name__", None)
    return str(name) if name else type(redactor).__name__


def redact_value(value: Any, redactor: Redactor, *, field: str = "value",
                 step_id: str | None = None) -> Any:
    """``redactor(value)``, checked to be a JSON value. Raises RedactionError naming the
    redactor (and the field and step it was given), never the value, when the redactor
    raises or returns something that is not JSON."""
    name = redactor_name(redactor)
    what = f"{field!r}" + (f" of step {step_id!r}" if step_id else "")
    try:
        out = redactor(value)
    except Exception as exc:
        raise RedactionError(
            f"redactor {name!r} raised {type(exc).__name__} on {what}: the value was not "
            "stored; fix the redactor (it returns the value to store, masked)",
            redactor=name, field=field, step_id=step_id) from None
    if out is value:
        return out
    try:
        return to_json_value(out, field)
    except NotJSONError as exc:
        raise RedactionError(
            f"redactor {name!r} returned a {type(out).__name__} for {what}, which cannot be "
            f"stored ({exc.reason}): the value was not stored; return JSON data (a str, "
            "number, list or dict)", redactor=name, field=field, step_id=step_id) from None


def redact_payload(payload: Mapping[str, Any], redactors: Sequence[Redactor],
                   step_id: str | None = None) -> dict[str, Any] | None:
    """The payload as it may leave the process, with the keys a redactor changed listed
    under ``"redacted"``; None when no redactor changed anything (the payload itself then
    leaves). Raises RedactionError (see :func:`redact_value`)."""
    out: dict[str, Any] | None = None
    marked: list[str] = []
    for key, value in payload.items():
        if key in STRUCTURAL or value is None:
            continue
        new = value
        for redactor in redactors:
            new = redact_value(new, redactor, field=key, step_id=step_id)
        if new is not value and new != value:
            if out is None:
                out = dict(payload)
            out[key] = new
            marked.append(key)
    if out is not None:  # (after any mark the payload carries already: run_started's)
        out[REDACTED] = [*payload.get(REDACTED, ()), *marked]
    return out


# ---------------------------------------------------------------------------- redactors
def mask_pattern(pattern: str | re.Pattern[str], mask: str = "[redacted]") -> Redactor:
    """A redactor that replaces every match of ``pattern`` in every string of a value, at
    any depth (dict keys are kept): ``Runtime(redact=mask_pattern(r"sk-[A-Za-z0-9]+"))``."""
    rx = re.compile(pattern)

    def mask_matches(value: Any) -> Any:
        return _walk(value, lambda text: rx.sub(mask, text), ())
    mask_matches.__qualname__ = f"mask_pattern({rx.pattern!r})"
    return mask_matches


def mask_keys(*keys: str, mask: str = "[redacted]") -> Redactor:
    """A redactor that replaces the value under any of ``keys`` in a dict, at any depth
    (``redact=mask_keys("card_number", "ssn")`` on a tool: its args and output)."""
    hidden = frozenset(keys)

    def mask_values(value: Any) -> Any:
        return _walk(value, None, hidden, mask)
    mask_values.__qualname__ = f"mask_keys{tuple(sorted(hidden))!r}"
    return mask_values


def _walk(value: Any, text: Callable[[str], str] | None, keys: Iterable[str],
          mask: str = "") -> Any:
    """``value`` with ``text`` applied to each string and the values under ``keys``
    masked; the value itself when nothing changed (a redactor changes nothing in place)."""
    if isinstance(value, str):
        return text(value) if text is not None else value
    if isinstance(value, Mapping):
        out = {k: (mask if k in keys else _walk(v, text, keys, mask))
               for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if isinstance(value, list | tuple):
        items = [_walk(v, text, keys, mask) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value
