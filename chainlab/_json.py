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

from chainlab._text import safe_repr

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

    def __init__(self, path: str, value: Any):
        self.path = path
        super().__init__(
            f"{path or 'the value'} is {type(value).__name__} {safe_repr(value)}, not JSON data"
        )


def to_json_value(value: Any, path: str = "") -> Any:
    """``value`` as plain JSON data: pydantic models dumped, tuples made lists.

    Raises :class:`NotJSONError` naming where the offending value sits.
    """
    if value is None or isinstance(value, str | bool | int):
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
    """A short hash of a function's code (bytecode, constants and names, nested functions
    included): the same source gives the same fingerprint in any process; an edited body
    gives another. Callables without code (builtins) hash their qualified name."""
    target = getattr(fn, "__func__", fn)
    code = getattr(target, "__code__", None)
    if code is None:
        code = getattr(vars(type(fn)).get("__call__"), "__code__", None)  # a callable object
    digest = hashlib.sha256()
    if code is None:
        digest.update(repr(getattr(fn, "__qualname__", type(fn).__qualname__)).encode())
    else:
        _hash_code(code, digest)
    return digest.hexdigest()[:16]


def _hash_code(code: Any, digest: Any) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _hash_code(const, digest)
        else:
            digest.update(repr(const).encode())
