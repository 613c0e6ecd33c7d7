"""JSON values and the identities stored runs depend on.

* :func:`to_json_value` makes a value plain JSON data (pydantic models dumped, tuples made
  lists) or raises :class:`NotJSONError` naming where the offending value sits: tool outputs,
  approved args and fork overrides all go through it.
* :func:`args_hash`, :func:`idempotency_key` and :func:`code_fingerprint` are identities
  written into the event log: a resumed run deduplicates a call by its idempotency key and a
  fork reruns a step whose tool's code fingerprint changed. A changed character here makes
  a stored run call an external API again, so ``tests/test_structure.py`` pins them byte for
  byte.

Bottom layer: stdlib, pydantic and :mod:`chainlab._text` only. :mod:`chainlab.tools`
re-exports the names it always exported.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from chainlab._text import int_digits_limit, int_too_long, safe_repr

__all__ = ["NotJSONError", "args_hash", "code_fingerprint", "idempotency_key", "to_json_value"]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def args_hash(args: Mapping[str, Any]) -> str:
    """A stable hash of resolved args (canonical JSON, sha256, 16 hex chars)."""
    return hashlib.sha256(_canonical(args).encode()).hexdigest()[:16]


def idempotency_key(run_id: str, step_id: str, args_digest: str, kind: str = "call") -> str:
    """The key of one logical call: the same across retries and recovery of that call."""
    raw = f"{run_id}\x1f{step_id}\x1f{args_digest}\x1f{kind}"
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


class NotJSONError(TypeError):
    """A value is not JSON data; ``.path`` says where."""

    def __init__(self, path: str, value: Any, why: str = "not JSON data"):
        self.path = path
        super().__init__(
            f"{path or 'the value'} is {type(value).__name__} {safe_repr(value)}, {why}"
        )


def _too_long(path: str, value: int) -> NotJSONError:
    return NotJSONError(path, value, f"an integer with more than {int_digits_limit()} digits, "
                                     "which cannot be stored as JSON; pass it as a string")


def to_json_value(value: Any, path: str = "") -> Any:
    """``value`` as plain JSON data: pydantic models dumped, tuples made lists.

    Raises :class:`NotJSONError` naming where the offending value sits.
    """
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int):
        if int_too_long(value):
            raise _too_long(path, value)
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSONError(path, value)
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise NotJSONError(f"{path}[{safe_repr(k)}] (key)", k)
            out[k] = to_json_value(v, f"{path}.{k}" if path else k)
        return out
    if isinstance(value, list | tuple):
        return [to_json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise NotJSONError(path, value)


def code_fingerprint(fn: Callable[..., Any]) -> str:
    """A short hash of what decides a function's behaviour: its code (bytecode, constants
    and names, nested functions included), its default argument values and the values its
    closure holds, where those are plain data (defaults: numbers, strings, tuples, lists,
    dicts; closure values: numbers, strings and tuples of them, since a closed-over list or
    dict is usually state, such as a log; a closed-over function counts by its own
    fingerprint). The same source and values give the same
    fingerprint in any process; an edited body, a changed default or closure value gives
    another. It cannot see globals, module state, files or services the code reads, nor
    closure values that are not plain data. Callables without code (builtins) hash their
    qualified name. A function with neither defaults nor a closure hashes exactly as
    before defaults and closures were covered (stored runs keep matching)."""
    target = getattr(fn, "__func__", fn)
    code = getattr(target, "__code__", None)
    if code is None:
        call = vars(type(fn)).get("__call__")
        code = getattr(call, "__code__", None)  # a callable object
        target = call if code is not None else target
    digest = hashlib.sha256()
    if code is None:
        digest.update(repr(getattr(fn, "__qualname__", type(fn).__qualname__)).encode())
    else:
        _hash_code(code, digest)
        _hash_values(target, digest)
    return digest.hexdigest()[:16]


def _hash_values(fn: Any, digest: Any) -> None:
    defaults = getattr(fn, "__defaults__", None)
    kwdefaults = getattr(fn, "__kwdefaults__", None)
    closure = getattr(fn, "__closure__", None)
    if defaults:
        digest.update(b"\x1fdefaults" + _plain(defaults).encode())
    if kwdefaults:
        digest.update(b"\x1fkwdefaults" + _plain(kwdefaults).encode())
    if closure:
        names = getattr(getattr(fn, "__code__", None), "co_freevars", ())
        for name, cell in zip(names, closure, strict=False):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell (not assigned yet)
                continue
            digest.update(f"\x1fclosure {name}=".encode()
                          + _plain(value, mutable=False).encode())


def _plain(value: Any, depth: int = 0, *, mutable: bool = True) -> str:
    """A stable text for plain data; for anything else only its type (what the fingerprint
    cannot see inside). With ``mutable=False`` (closure values) lists and dicts count by
    type only: a closure over a list that a tool appends to (a log) is state, not code."""
    if value is None or isinstance(value, bool | str | float):
        return repr(value)
    if isinstance(value, int):
        return "<int too long>" if int_too_long(value) else repr(value)
    if depth > 8:
        return "..."
    if isinstance(value, tuple) or (mutable and isinstance(value, list)):
        return "[" + ",".join(_plain(v, depth + 1, mutable=mutable) for v in value) + "]"
    if not mutable and isinstance(value, list | dict):
        return f"<{type(value).__qualname__}>"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_plain(v, depth + 1) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted((repr(k), _plain(v, depth + 1, mutable=mutable))
                       for k, v in value.items())
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    if callable(value) and hasattr(value, "__code__"):
        return "fn:" + code_fingerprint(value)
    return f"<{type(value).__qualname__}>"


def _hash_code(code: Any, digest: Any) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _hash_code(const, digest)
        else:
            digest.update(repr(const).encode())
