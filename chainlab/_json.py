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
           "clean_text", "code_fingerprint", "idempotency_key", "join_path", "json_encoder",
           "nonfinite_at", "scalar_problem", "to_json_value", "value_size"]

#: the deepest nesting of arrays and objects a value may have (``[[1]]`` is 2 deep)
MAX_DEPTH = 100
#: the longest string (or object key) a value may hold, in characters
MAX_STRING_CHARS = 4 * 1024 * 1024
#: the largest value, in :func:`value_size` units (about the characters of its JSON text)
MAX_VALUE_SIZE = 16 * 1024 * 1024

_SURROGATE = re.compile("[\ud800-\udfff]")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def json_encoder(*, sort_keys: bool = False, allow_nan: bool = True,
                 default: Callable[[Any], Any] | None = None) -> Callable[[Any], str]:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=False, ...)`` made once (it
    builds a new encoder at every call: 8 -> 3 us for an event's payload). Same text, same
    errors (TypeError, ValueError; a value that holds itself is a ValueError)."""
    from json import encoder as std
    def refuse(value: Any) -> Any:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
    encode = std.c_make_encoder(None, default or refuse, std.encode_basestring,  # type: ignore[attr-defined]
                                None, ":", ",", sort_keys, False, allow_nan)

    def dumps(value: Any) -> str:
        try:
            return "".join(encode(value, 0))
        except RecursionError:  # (no circular check: the value holds itself)
            raise ValueError("Circular reference detected") from None

    return dumps


_canonical = json_encoder(sort_keys=True, default=str)


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


def _unicode(text: str) -> bool:
    """True when ``text`` is Unicode text: no surrogate code points (UTF-8 can encode it;
    the encoder is C speed, a regex search is three times slower)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def scalar_problem(value: Any) -> str | None:
    """Why the gate refuses this number or string (None: it passes, or it is not a scalar).
    """
    if isinstance(value, str):
        if len(value) > MAX_STRING_CHARS:
            return (f"a string of {len(value)} characters; the limit is {MAX_STRING_CHARS} "
                    "(store large data elsewhere and pass a reference to it)")
        if not _unicode(value):
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
    """One walk of :func:`to_json_value` (the size counted so far). Where a value sits is
    kept as a chain of ``(parent, key)`` pairs and written out as a path only for an error:
    the walk of a good value formats nothing."""

    __slots__ = ("size",)

    def __init__(self) -> None:
        self.size = 0

    def walk(self, value: Any, where: Any, depth: int) -> Any:
        kind = type(value)
        if kind is str:
            self.size += len(value)
            if len(value) > MAX_STRING_CHARS or self.size > MAX_VALUE_SIZE \
                    or not _unicode(value):
                raise self._refused(where, value)
            return value
        if kind is int:
            self.size += 1
            if int_too_long(value):
                raise self._refused(where, value)
            return value
        if kind is float:
            self.size += 1
            if value - value != 0.0:  # (NaN and infinities; x - x is 0.0 for any other)
                raise self._refused(where, value)
            return value
        if value is None or kind is bool:
            self.size += 1
            return value
        if kind is dict or kind is list or kind is tuple:
            if depth >= MAX_DEPTH:
                raise NotJSONError(_path(where), value, f"nested more than {MAX_DEPTH} levels "
                                   "deep, the limit; flatten the data")
            self.size += 1
            below = depth + 1
            if kind is dict:
                out = {}
                for k, v in value.items():
                    self._key(k, where)
                    out[k] = self.walk(v, (where, k), below)
                result: Any = out
            else:
                result = [self.walk(v, (where, i), below) for i, v in enumerate(value)]
            if self.size > MAX_VALUE_SIZE:
                raise self._refused(where, value)
            return result
        return self._other(value, where, depth)

    def _key(self, key: Any, where: Any) -> None:
        if type(key) is not str and not isinstance(key, str):
            raise NotJSONError(f"{_path(where)}[{safe_repr(key)}] (key)", key,
                               "not a string (JSON object keys are strings)")
        self.size += len(key)
        if len(key) > MAX_STRING_CHARS or not _unicode(key):
            raise NotJSONError(f"{_path((where, key))} (key)", key, scalar_problem(key) or "")

    def _other(self, value: Any, where: Any, depth: int) -> Any:
        """Subclasses of the JSON types (an IntEnum, an OrderedDict), pydantic models, and
        what is not JSON at all."""
        if isinstance(value, str | int | float):  # (bool is an int: never here)
            why = scalar_problem(value)
            if why is not None:
                raise NotJSONError(_path(where), value, why)
            self.size += len(value) if isinstance(value, str) else 1
            return value
        if isinstance(value, dict):
            return self.walk(dict(value), where, depth)
        if isinstance(value, list | tuple):
            return self.walk(list(value), where, depth)
        from pydantic import BaseModel  # (only here: chainlab.events uses the gate without it)

        if isinstance(value, BaseModel):
            return self.walk(value.model_dump(mode="json"), where, depth)
        raise NotJSONError(_path(where), value)

    def _refused(self, where: Any, value: Any) -> NotJSONError:
        why = scalar_problem(value) if not isinstance(value, dict | list | tuple) else None
        if why is None:  # (within the rules for one value: over the size of all of them)
            why = (f"past the size limit: the value holds more than {MAX_VALUE_SIZE} "
                   "characters of data up to here; store large data elsewhere and pass a "
                   "reference to it")
        return NotJSONError(_path(where), value, why)


def _path(where: Any) -> str:
    """The path a chain of ``(parent, key)`` pairs stands for (its root is a string)."""
    keys: list[str | int] = []
    while isinstance(where, tuple):
        where, key = where
        keys.append(key)
    path = where
    for key in reversed(keys):
        path = join_path(path, key)
    return path  # type: ignore[no-any-return]


def nonfinite_at(value: Any, path: str = "") -> tuple[str, float] | None:
    """Where the first NaN or infinity sits in Python data (dicts, lists, tuples, sets), and
    which: ``(path, value)``, or None. For data that is converted before the gate sees it
    (pydantic's JSON form writes them as null)."""
    found = _nonfinite(value, path, 0)
    return None if found is None else (_path(found[0]), found[1])


def _nonfinite(value: Any, where: Any, depth: int) -> tuple[Any, float] | None:
    kind = type(value)
    if kind is float:
        return None if value - value == 0.0 else (where, value)
    if depth > MAX_DEPTH:  # the gate refuses the nesting itself
        return None
    if kind is dict:
        items: Any = value.items()
    elif kind is list or kind is tuple:
        items = enumerate(value)
    elif isinstance(value, float):
        return None if math.isfinite(value) else (where, value)
    elif isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list | tuple | set | frozenset):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        if type(item) in _PLAIN_SCALARS:
            continue
        found = _nonfinite(item, (where, key if isinstance(key, str | int) else repr(key)),
                           depth + 1)
        if found is not None:
            return found
    return None


_PLAIN_SCALARS = frozenset({str, int, bool, type(None)})


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
    return text if _unicode(text) else _SURROGATE.sub("\ufffd", text)


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
