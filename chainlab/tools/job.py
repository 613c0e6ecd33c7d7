"""Remote jobs: tools that submit work elsewhere and are waited on durably (issue 27).

A job is a class registered with ``@toolbox.job(...)``::

    @toolbox.job(side_effects=True, poll_every_s=2.0, timeout_s=3600)
    class Train:
        async def submit(self, dataset: str, epochs: int, ctx: CallContext) -> dict: ...
        async def poll(self, handle: dict, ctx: CallContext) -> JobStatus: ...
        async def cancel(self, handle: dict, ctx: CallContext) -> None: ...      # optional
        async def find(self, key: str, ctx: CallContext) -> dict | None: ...   # optional

``submit``'s parameters are the step's args; it returns the job's HANDLE (JSON data), which
the runtime records (``job_submitted``) before it waits; from then on it only ever polls,
cancels or attaches to that handle, never submits again (see the runtime's attempt module).
``poll`` answers a :class:`JobStatus`. Methods may be sync (run in a worker thread) or
async. The result is a :class:`JobTool`: a :class:`~chainlab.tools.Tool` (its input schema
is ``submit``'s, its output schema ``output_type=``'s) that carries a :class:`JobSpec`.

Options beside the usual tool metadata (``side_effects``, ``idempotent``,
``requires_confirmation``, ``retry``, ``compensate``, ``timeout_s`` = the most the runtime
waits for the job, from its submission):

=====================  ======================================================================
``poll_every_s``       seconds between polls (a callback can end the wait sooner)
``max_poll_every_s``   the cap of the back-off after poll errors (default 30 x poll_every_s)
``dedupe_by_key``      the backend deduplicates submissions by ``ctx.idempotency_key``: after
                       a crash between reserve and record, submitting again is safe
``output_type``        the type of ``JobStatus.succeeded``'s output (the step's output schema)
``handle_type``        the handle's type, validated after submit and on every re-attach
``on_not_found``       ``"fail"`` (default) or ``"resubmit"`` (under a new key) when ``poll``
                       answers :meth:`JobStatus.not_found`
``max_poll_errors``    consecutive failed polls before the step goes ``in_doubt``
``progress_every_s``   ``job_progress`` events at most this often (plus state changes)
``call_timeout_s``     the timeout of ONE submit, poll, find or cancel call
=====================  ======================================================================
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from pydantic import TypeAdapter

from chainlab._json import clean_text, code_fingerprint
from chainlab._text import safe_repr
from chainlab.errors import ToolDefinitionError
from chainlab.tools.contract import Tool

__all__ = ["JOB_STATES", "JobSpec", "JobState", "JobStatus", "JobTool", "make_job"]

JobState = Literal["pending", "running", "succeeded", "failed", "cancelled", "not_found"]
JOB_STATES: frozenset[str] = frozenset(
    {"pending", "running", "succeeded", "failed", "cancelled", "not_found"})
#: states after which a job never changes again
JOB_ENDED: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "not_found"})


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What ``poll`` says about a job. Build it with the constructors:
    ``JobStatus.pending()``, ``.running(progress=0.4, note=...)``, ``.succeeded(output)``,
    ``.failed(message, kind=ErrorKind.TRANSIENT)``, ``.cancelled()``, ``.not_found()``."""

    state: JobState
    progress: float | None = None
    note: str | None = None
    output: Any = None
    message: str | None = None
    kind: str | None = None

    @classmethod
    def pending(cls, note: str | None = None) -> JobStatus:
        return cls("pending", note=note)

    @classmethod
    def running(cls, progress: float | None = None, note: str | None = None) -> JobStatus:
        if progress is not None and not (isinstance(progress, int | float)
                                         and 0.0 <= progress <= 1.0):
            raise ValueError(f"progress must be a fraction in [0, 1], got {progress!r}")
        return cls("running", progress=None if progress is None else float(progress), note=note)

    @classmethod
    def succeeded(cls, output: Any = None) -> JobStatus:
        return cls("succeeded", progress=1.0, output=output)

    @classmethod
    def failed(cls, message: str, kind: str = "execution_failed") -> JobStatus:
        """The job ended badly; ``kind`` (an ErrorKind) decides whether the step's retry
        policy submits it again (a new job under a new key)."""
        return cls("failed", message=str(message), kind=str(kind))

    @classmethod
    def cancelled(cls, note: str | None = None) -> JobStatus:
        return cls("cancelled", note=note)

    @classmethod
    def not_found(cls, note: str | None = None) -> JobStatus:
        """The backend does not know this handle (expired history, another backend)."""
        return cls("not_found", note=note)

    @property
    def ended(self) -> bool:
        return self.state in JOB_ENDED

    def checked(self) -> JobStatus:
        """This status as a run keeps it: ``progress`` a fraction in [0, 1] (or None), the
        texts storable (a surrogate in a note or a message is replaced: they are for a
        person). The output is checked with the tool's output. Raises ValueError."""
        progress = self.progress
        if progress is not None and (isinstance(progress, bool)
                                     or not isinstance(progress, int | float)
                                     or not 0.0 <= progress <= 1.0):
            raise ValueError(f"progress must be a fraction in [0, 1], got {safe_repr(progress)}")
        def text(value: str | None) -> str | None:
            return None if value is None else clean_text(str(value))

        return dataclasses.replace(self, note=text(self.note), message=text(self.message),
                                   kind=text(self.kind))


@dataclass(slots=True)
class JobSpec:
    """The job part of a :class:`JobTool`: the instance's methods and the waiting options."""

    instance: Any
    poll: Callable[..., Any]
    cancel: Callable[..., Any] | None
    find: Callable[..., Any] | None
    poll_every_s: float = 2.0
    max_poll_every_s: float = 60.0
    dedupe_by_key: bool = False
    handle_adapter: TypeAdapter[Any] | None = None
    on_not_found: Literal["fail", "resubmit"] = "fail"
    max_poll_errors: int = 5
    progress_every_s: float = 5.0
    call_timeout_s: float = 60.0
    _ctx: dict[str, bool] = field(default_factory=dict)  # method name -> takes ctx

    async def call(self, name: str, arg: Any, ctx: Any) -> Any:
        """Call ``poll``/``cancel``/``find`` (``name``) with ``arg`` (a handle or a key),
        under ``call_timeout_s``. A sync method runs in a worker thread. Raises what the
        method raises, TimeoutError when it does not answer in time."""
        fn = {"poll": self.poll, "cancel": self.cancel, "find": self.find}[name]
        assert fn is not None
        kwargs = {"ctx": ctx} if self._ctx.get(name) else {}
        with anyio.fail_after(self.call_timeout_s):
            if inspect.iscoroutinefunction(fn):
                return await fn(arg, **kwargs)
            return await anyio.to_thread.run_sync(lambda: fn(arg, **kwargs),
                                                  abandon_on_cancel=True)

    def check_handle(self, handle: Any) -> Any:
        """The handle as validated data. Raises ValueError/ValidationError naming the
        problem."""
        if self.handle_adapter is not None:
            return self.handle_adapter.validate_python(handle)
        return handle


class JobTool(Tool):
    """A :class:`Tool` whose call is a remote job: ``fn`` is the instance's ``submit``."""

    __slots__ = ("job",)
    kind = "job"  # submitted once, then waited on (chainlab.runtime.engine.attempt.job)

    def __init__(self, fn: Callable[..., Any], *, job: JobSpec, **meta: Any):
        super().__init__(fn, **meta)
        self.job = job

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        spec = self.job
        out["job"] = {"poll_every_s": spec.poll_every_s, "dedupe_by_key": spec.dedupe_by_key,
                      "find": spec.find is not None, "cancel": spec.cancel is not None,
                      "on_not_found": spec.on_not_found}
        return out

    def __repr__(self) -> str:
        return f"<JobTool {self.name}{' [dedupe_by_key]' if self.job.dedupe_by_key else ''}>"


_JOB_OPTIONS = ("poll_every_s", "max_poll_every_s", "dedupe_by_key", "output_type",
                "handle_type", "on_not_found", "max_poll_errors", "progress_every_s",
                "call_timeout_s")


def make_job(cls_or_obj: Any, **meta: Any) -> JobTool:
    """Build the :class:`JobTool` for a job class (instantiated without arguments) or an
    instance. Raises ToolDefinitionError naming what is missing or wrong."""
    obj = cls_or_obj() if isinstance(cls_or_obj, type) else cls_or_obj
    cls = type(obj)
    label = meta.get("name") or cls.__name__
    opts = {k: meta.pop(k) for k in _JOB_OPTIONS if k in meta}
    for method in ("submit", "poll"):
        if not callable(getattr(cls, method, None)):
            raise ToolDefinitionError(
                f"job {label!r}: define a method {method}(...) (submit returns the handle, "
                "poll(handle) returns a JobStatus)")
    optional = {m: getattr(obj, m) if callable(getattr(cls, m, None)) else None
                for m in ("cancel", "find")}
    poll_every = float(opts.get("poll_every_s", 2.0))
    if poll_every <= 0:
        raise ToolDefinitionError(f"job {label!r}: poll_every_s must be > 0, got {poll_every}")
    on_nf = opts.get("on_not_found", "fail")
    if on_nf not in ("fail", "resubmit"):
        raise ToolDefinitionError(
            f"job {label!r}: on_not_found must be 'fail' or 'resubmit', got {safe_repr(on_nf)}")
    adapters = {}
    for opt in ("handle_type", "output_type"):
        if opts.get(opt) is not None:
            try:
                adapters[opt] = TypeAdapter(opts[opt])
            except Exception as exc:
                raise ToolDefinitionError(f"job {label!r}: bad {opt}: {exc}") from None
    spec = JobSpec(
        instance=obj, poll=obj.poll, cancel=optional["cancel"], find=optional["find"],
        poll_every_s=poll_every,
        max_poll_every_s=float(opts.get("max_poll_every_s", max(poll_every, 30 * poll_every))),
        dedupe_by_key=bool(opts.get("dedupe_by_key", False)),
        handle_adapter=adapters.get("handle_type"),
        on_not_found=on_nf,
        max_poll_errors=int(opts.get("max_poll_errors", 5)),
        progress_every_s=float(opts.get("progress_every_s", 5.0)),
        call_timeout_s=float(opts.get("call_timeout_s", 60.0)),
    )
    for m in ("poll", "cancel", "find"):
        fn = getattr(spec, m)
        if fn is not None:
            spec._ctx[m] = "ctx" in inspect.signature(fn).parameters
    meta.setdefault("name", cls.__name__)
    meta.setdefault("description", inspect.getdoc(cls) or "")
    meta.setdefault("side_effects", True)
    tool = JobTool(obj.submit, job=spec, **meta)
    tool.output_adapter = adapters.get("output_type")
    tool._check_out = (tool.output_adapter.validator.validate_python
                       if tool.output_adapter is not None else None)
    # the job's code is all of its methods: a changed poll is another version too
    parts = [code_fingerprint(getattr(cls, m)) for m in ("submit", "poll", "cancel", "find")
             if callable(getattr(cls, m, None))]
    tool.fingerprint = hashlib.sha256("".join(parts).encode()).hexdigest()[:16]
    return tool
