"""JSON values and the identities stored runs depend on.

* :func:`to_json_value` is THE gate every value passes on its way in (a run's context, step
  args, a person's edited args and fork edits, tool outputs, job handles and progress, MCP
  results, usage numbers, HTTP bodies and query values; DESIGN §20): it makes a value plain
  JSON data (pydantic models dumped, tuples made lists) or raises :class:`NotJSONError`
  naming where the offending value sits (``outputs.rows[3].price``) and why. It refuses what
  a store, a JSON encoder or a client would choke on later, when it is too late to say which
  value it was: NaN and infinities, integers over :data:`~chainlab._text.INT_DIGITS_LIMIT`
  digits, strings with surrogate code points (a lone ``\\ud800`` is not Unicode text: UTF-8
  cannot encode it, so SQLite and PostgreSQL refuse it), keys that are not strings, nesting
  deeper than :data:`MAX_DEPTH`, a string longer than :data:`MAX_STRING_CHARS` and a value
  whose size (:func:`value_size`) is over :data:`MAX_VALUE_SIZE`. The limits are documented
  in ``docs/values.md``.
* :func:`scalar_problem` is the gate's rule for one number or string, for walkers of their
  own (the plan loader reports every bad value of a plan with its line);
  :func:`clean_text` makes text from outside (an exception's message, a server's error)
  storable as it is shown to a person: surrogates replaced, never refused.
* :func:`args_hash`, :func:`idempotency_key` and :func:`code_fingerprint` are identities
  written into the event log: a resumed run deduplicates a call by its idempotency key and a
  fork reruns a step whose tool's code fingerprint changed. A changed character here makes
  a stored run call an external API again, so ``tests/test_structure.py`` pins them byte for
  byte.

Bottom layer: stdlib, :mod:`chainlab._text` and the root error only (pydantic when a model
is passed). :mod:`chainlab.tools`
re-exports the names it always exported.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from chainlab._error_root import ChainlabError
from chainlab._text import int_digits_limit, int_too_long, safe_repr

__all__ = ["MAX_DEPTH", "MAX_STRING_CHARS", "MAX_VALUE_SIZE", "NotJSONError", "args_hash",
           "clean_text", "code_fingerprint", "idempotency_key", "join_path", "nonfinite_at",
           "scalar_problem",
           "to_json_value", "value_size"]

#: the deepest nesting of arrays and objects a value may have (``[[1]]`` is 2 deep)
MAX_DEPTH = 100
#: the longest string (or object key) a value may hold, in characters
MAX_STRING_CHARS = 4 * 1024 * 1024
#: the largest value, in :func:`value_size` units (about the characters of its JSON text)
MAX_VALUE_SIZE = 16 * 1024 * 1024

_SURROGATE = re.compile("[\ud800-\udfff]")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def args_hash(args: Mapping[str, Any]) -> str:
    """A stable hash of resolved args (canonical JSON, sha256, 16 hex chars)."""
    return hashlib.sha256(_canonical(args).encode()).hexdigest()[:16]


def idempotency_key(run_id: str, step_id: str, args_digest: str, kind: str = "call") -> str:
    """The key of one logical call: the same across retries and recovery of that call."""
    raw = f"{run_id}\x1f{step_id}\x1f{args_digest}\x1f{kind}"
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


class NotJSONError(ChainlabError, TypeError):
    """A value is not JSON data chainlab can keep: ``.path`` says where it sits
    (``rows[3].price``; ``""``: the value itself), ``.reason`` what is wrong with it.

    A :class:`~chainlab.errors.ChainlabError`; a ``TypeError`` too, as it always was."""

    def __init__(self, path: str, value: Any, why: str = "not JSON data"):
        self.path = path
        self.reason = why
        where = path if len(path) <= 120 else f"{path[:50]}...{path[-60:]}"
        super().__init__(
            f"{where or 'the value'} is {type(value).__name__} {safe_repr(value)}, {why}"
        )


def join_path(path: str, key: str | int) -> str:
    """``path`` extended by an object key (``a.key``, ``a["odd key"]``) or a list index
    (``a[3]``): how the gate names where a value sits. Safe to show and to store whatever
    the key holds (an odd key is written as JSON, ASCII only)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if len(key) <= 100 and _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key[:100] + ('...' if len(key) > 100 else ''))}]"


def scalar_problem(value: Any) -> str | None:
    """Why the gate refuses this number or string (None: it passes, or it is not a scalar).
    """
    if isinstance(value, str):
        if len(value) > MAX_STRING_CHARS:
            return (f"a string of {len(value)} characters; the limit is {MAX_STRING_CHARS} "
                    "(store large data elsewhere and pass a reference to it)")
        if not value.isascii():
            found = _SURROGATE.search(value)
            if found is not None:
                return (f"text with a lone surrogate ({found.group()!r} at character "
                        f"{found.start()}), which is not Unicode text and cannot be stored; "
                        "decode bytes with errors='replace', or send the text as it was")
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if int_too_long(value):
            return (f"an integer with more than {int_digits_limit()} digits, which cannot be "
                    "stored as JSON; pass it as a string")
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "not a JSON number (NaN and infinities have no JSON form); send null or a string"
    return None


def value_size(value: Any) -> int:
    """A value's size as the gate counts it: every string and key by its characters, every
    other value as 1 (about the characters of its JSON text, without the punctuation)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return 1 + sum(len(k) + value_size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return 1 + sum(value_size(v) for v in value)
    return 1


class _Gate:
    """One walk of :func:`to_json_value` (the size counted so far)."""

    __slots__ = ("size",)

    def __init__(self) -> None:
        self.size = 0

    def walk(self, value: Any, path: str, depth: int) -> Any:
        if value is None or value is True or value is False:
            self.size += 1
            return value
        kind = type(value)
        if kind is str or kind is int or kind is float or isinstance(value, str | int | float):
            why = scalar_problem(value)
            if why is not None:
                raise NotJSONError(path, value, why)
            self.size += len(value) if isinstance(value, str) else 1
            self._check_size(path, value)
            return value
        if isinstance(value, dict | list | tuple):
            if depth >= MAX_DEPTH:
                raise NotJSONError(path, value, f"nested more than {MAX_DEPTH} levels deep, "
                                   "the limit; flatten the data")
            self.size += 1
            if isinstance(value, dict):
                out = {}
                for k, v in value.items():
                    if not isinstance(k, str):
                        raise NotJSONError(f"{path}[{safe_repr(k)}] (key)", k,
                                           "not a string (JSON object keys are strings)")
                    where = join_path(path, k)
                    why = scalar_problem(k)
                    if why is not None:
                        raise NotJSONError(f"{where} (key)", k, why)
                    self.size += len(k)
                    out[k] = self.walk(v, where, depth + 1)
                return out
            return [self.walk(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
        from pydantic import BaseModel  # (only here: chainlab.events uses the gate without it)

        if isinstance(value, BaseModel):
            return self.walk(value.model_dump(mode="json"), path, depth)
        raise NotJSONError(path, value)

    def _check_size(self, path: str, value: Any) -> None:
        if self.size > MAX_VALUE_SIZE:
            raise NotJSONError(path, value, f"past the size limit: the value holds more than "
                               f"{MAX_VALUE_SIZE} characters of data up to here; store large "
                               "data elsewhere and pass a reference to it")


def nonfinite_at(value: Any, path: str = "", depth: int = 0) -> tuple[str, float] | None:
    """Where the first NaN or infinity sits in Python data (dicts, lists, tuples, sets), and
    which: ``(path, value)``, or None. For data that is converted before the gate sees it
    (pydantic's JSON form writes them as null)."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value)
    if depth > MAX_DEPTH:  # the gate refuses the nesting itself
        return None
    if isinstance(value, dict):
        items: Any = ((join_path(path, k if isinstance(k, str) else repr(k)), v)
                      for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    elif isinstance(value, set | frozenset):
        items = ((path, v) for v in value)
    else:
        return None
    for where, item in items:
        if isinstance(item, float | dict | list | tuple | set | frozenset):
            found = nonfinite_at(item, where, depth + 1)
            if found is not None:
                return found
    return None


def to_json_value(value: Any, path: str = "") -> Any:
    """``value`` as plain JSON data: pydantic models dumped, tuples made lists; THE gate of
    every value that enters chainlab (the module docstring lists what it refuses).

    ``path`` names the value in messages (``outputs``: a bad value inside is
    ``outputs.rows[3].price``). Raises :class:`NotJSONError` naming where the offending
    value sits and why.
    """
    return _Gate().walk(value, path, 0)


def clean_text(text: str) -> str:
    """``text`` with every surrogate code point replaced by U+FFFD (what a person reads of
    an exception's message or a server's error: kept, never refused, always storable)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)


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
