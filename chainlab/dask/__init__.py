"""Run sync tool bodies on a Dask cluster while scheduling stays in the runtime.

::

    from distributed import Client
    from chainlab.dask import DaskExecutor

    client = Client("tcp://scheduler:8786")          # or Client(LocalCluster(...))
    runtime = Runtime(toolbox, store, executor=DaskExecutor(client))

What goes to the cluster is only the call of a SYNC tool's function: dependencies, retries,
timeouts, confirmation, compensation and persistence stay in the runtime, exactly as with the
default executor (async tools keep running on the event loop). A timeout or a cancellation of
the run cancels the task on the cluster; like any Python thread, a body that already runs on
a worker goes on until it returns, and its result is dropped.

One attempt, one start (DESIGN §20): Dask starts a task again when the worker that ran it
died (``distributed.scheduler.allowed-failures``, 3 by default) or lost its result. So the
task's first act, before it calls the tool, is to CLAIM its attempt (run, step, kind, attempt
number, epoch) on the scheduler, where :class:`AttemptClaims` (a scheduler plugin the
executor registers once) answers in one step of the scheduler's event loop: a second start
of the same attempt, or a start under an epoch older than one already seen for the run, is
refused before the tool is called. The runtime then sees a lost call: ``in_doubt`` for a
side-effecting tool that is not idempotent, a retry (a new attempt) for a safe one. When
Dask gives up on a task (``KilledWorker``) or the run stops waiting for it, the executor
claims the attempt itself: if no body had claimed it, none ever will, and the call is known
not to have started (retried even when unsafe). The scheduler, like the workers, needs
chainlab installed.

Everything crosses the wire pickled (cloudpickle), even on an in-process cluster, so that a
local test shows the errors a real cluster would: the function, its args and its output must
be serialisable, else the step fails with a message that names the step and the tool. The
workers need chainlab and the tools' module installed (a function defined in ``__main__`` or
in a notebook is shipped by value).

This package is the only part of chainlab that imports ``dask``/``distributed`` (extra
``dask``); :mod:`.claims` holds the attempt claims.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib
import logging
import pickle
import secrets
import sys
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import MissingExtraError, PermanentError, ToolError, TransientError

try:
    import cloudpickle
    import distributed
    from distributed.protocol.pickle import dumps as _dask_dumps
    from distributed.scheduler import KilledWorker
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("distributed", "dask", "chainlab.dask.DaskExecutor") from _exc

from chainlab.dask.claims import AttemptClaims, AttemptRefused, attempt_id, claim_on_worker

if TYPE_CHECKING:
    from chainlab.tools import CallContext, Tool

__all__ = ["AttemptClaims", "AttemptRefused", "DaskExecutor", "Submission"]

log = logging.getLogger("chainlab.dask")

SubmitOptions = Callable[["Tool", "CallContext"], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Submission:
    """One task sent to the cluster: its Dask key, the call it served and how it ended
    (``finished``, ``error``, ``cancelled`` by a timeout or the run, or ``lost`` when the
    cluster dropped it)."""

    key: str
    run_id: str
    step_id: str
    attempt: int
    kind: str
    tool: str
    outcome: str


class DaskExecutor:
    """An :class:`chainlab.runtime.Executor` that runs sync tool bodies on a Dask cluster.

    ``client`` is a ``distributed.Client`` (synchronous or asynchronous) or a scheduler
    address, for which a client is created and closed by :meth:`close`.
    ``submit_options(tool, ctx)`` may return extra ``Client.submit`` arguments per call
    (``workers=``, ``resources=``, ``priority=``, ...). The last ``history`` submissions are
    kept in :attr:`submissions` (keys and outcomes, for debugging and tests). Each body
    claims its attempt on the scheduler before the call (the module docstring says why).

    ``call`` raises what the tool raised (the same exception class as a local call, so the
    runtime classifies it the same way), PermanentError when the call cannot be sent to the
    cluster, ToolError when the output cannot be sent back, TransientError when the cluster
    lost the task (a worker died, the task was cancelled by someone else, or Dask started
    it a second time and the claim refused that start: the outcome is unknown, unless the
    executor's own claim shows that no body ever started it, then ``before_effect``).
    """

    def __init__(self, client: distributed.Client | str, *,
                 submit_options: SubmitOptions | None = None, history: int = 1000):
        self._owned: list[Any] = []
        if isinstance(client, str):
            client = _client(client)
            self._owned.append(client)
        self.client: distributed.Client = client
        self.submit_options = submit_options
        self.submissions: deque[Submission] = deque(maxlen=history)
        self._claims_ready = False

    @classmethod
    def connect(cls, address: str, **kwargs: Any) -> DaskExecutor:
        """An executor on a new client of the scheduler at ``address``, or of a new
        ``LocalCluster`` of this machine for ``"local"``; :meth:`close` closes them.

        Raises ConnectionError when the scheduler cannot be reached (within Dask's
        ``distributed.comm.timeouts.connect``).
        """
        if address != "local":
            return cls(address, **kwargs)
        cluster = distributed.LocalCluster(dashboard_address=":0")
        try:
            executor = cls(distributed.Client(cluster), **kwargs)
        except BaseException:
            cluster.close()
            raise
        executor._owned += [executor.client, cluster]
        return executor

    # ------------------------------------------------------------------ Executor protocol
    async def call(self, tool: Tool, kwargs: dict[str, Any], ctx: CallContext) -> Any:
        """Run one call: async tools on the loop, sync tools as a task on the cluster."""
        if tool.is_async:
            return await tool.fn(**kwargs)
        label = f"step {ctx.step_id!r} (tool {tool.name!r})"
        payload = _pack(tool, kwargs, label)
        options = dict(self.submit_options(tool, ctx)) if self.submit_options else {}
        key = f"{tool.name}-{secrets.token_hex(8)}"
        claim = {"attempt": attempt_id(ctx), "run_id": ctx.run_id, "epoch": ctx.epoch}
        await self._register_claims()
        future = self.client.submit(_call_on_worker, payload, label, claim, key=key,
                                    pure=False, **options)
        outcome = "error"
        try:
            packed = await self._on_client_loop(self.client.gather(future, asynchronous=True))
            outcome = "finished"
        except anyio.get_cancelled_exc_class():
            outcome = "cancelled"
            with anyio.CancelScope(shield=True):
                await self._cancel(future)
                await self._claim(claim, key)  # a body not started yet never starts
            raise
        except AttemptRefused as exc:
            outcome = "lost"
            raise TransientError(
                f"{label}: a second start of this attempt (task {key!r}) was refused ({exc}); "
                "Dask starts a task again when its worker died or lost the result, so "
                "whether the first start's call took effect is unknown") from None
        except (concurrent.futures.CancelledError, KilledWorker) as exc:
            outcome = "lost"
            what = "died" if isinstance(exc, KilledWorker) else "was cancelled by the cluster"
            unstarted = await self._claim(claim, key)
            raise TransientError(
                f"{label}: the Dask task {key!r} {what} ({exc}); "
                + ("no body had started the call" if unstarted
                   else "the call had started: its outcome is unknown"),
                before_effect=unstarted) from exc
        finally:
            self.submissions.append(Submission(key, ctx.run_id, ctx.step_id, ctx.attempt,
                                               ctx.kind, tool.name, outcome))
            del future  # release the task's result on the cluster
        return _unpack(packed, label)

    # ------------------------------------------------------------------ client plumbing
    async def _on_client_loop(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Await a coroutine of the client on the client's own loop (an asynchronous client
        shares ours; a synchronous one runs its loop in a thread).

        Cancelling the awaiting task does not cancel the coroutine (distributed's gather
        does not like being interrupted): it goes on until :meth:`_cancel` ends it, and its
        outcome is then dropped.
        """
        io_loop = self.client.loop
        if io_loop is None:
            raise TransientError(f"the Dask client {self.client!r} is closed")
        loop: asyncio.AbstractEventLoop = io_loop.asyncio_loop  # type: ignore[attr-defined]
        if loop is asyncio.get_running_loop():
            waiter: asyncio.Future[Any] = asyncio.ensure_future(coro)
        else:
            waiter = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))
        try:
            return await asyncio.shield(waiter)
        except asyncio.CancelledError:
            waiter.add_done_callback(_drop_outcome)
            raise

    async def _register_claims(self) -> None:
        """Register :class:`AttemptClaims` on the scheduler once (idempotent there too: a
        second executor keeps the first one's claims)."""
        if self._claims_ready:
            return
        try:
            await self._on_client_loop(self._scheduler().register_scheduler_plugin(
                plugin=_dask_dumps(AttemptClaims()), name=AttemptClaims.name, idempotent=True))
        except Exception as exc:  # nothing was sent to run
            raise PermanentError(
                f"cannot register chainlab's attempt claims on the Dask scheduler "
                f"({type(exc).__name__}: {exc}); the scheduler needs chainlab installed, as "
                "the workers do", before_effect=True) from exc
        self._claims_ready = True

    async def _claim(self, claim: dict[str, Any], key: str) -> bool:
        """Claim an attempt for the executor itself: True when no body had claimed it (and
        so none ever will), False when one had, or when the scheduler cannot say."""
        try:
            with anyio.fail_after(10):
                answer = await self._on_client_loop(self._scheduler().chainlab_claim_attempt(
                    **claim, by="executor", task=key))
        except Exception:
            log.warning("could not claim attempt %s for the executor", claim, exc_info=True)
            return False
        return bool(answer.get("ok"))

    def _scheduler(self) -> Any:
        scheduler = self.client.scheduler
        if scheduler is None:
            raise TransientError(f"the Dask client {self.client!r} is closed")
        return scheduler

    async def _cancel(self, future: distributed.Future) -> None:
        try:
            with anyio.move_on_after(10):
                await self._on_client_loop(self.client.cancel([future], asynchronous=True))
        except Exception:
            log.warning("could not cancel Dask task %s", future.key, exc_info=True)

    def close(self) -> None:
        """Close the client (and cluster) if this executor created them."""
        while self._owned:
            self._owned.pop(0).close()

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<DaskExecutor {self.client!r}>"


@dataclass(frozen=True, slots=True)
class _ByName:
    """A tool function sent by name: ``@toolbox.tool`` replaces the module attribute with
    the Tool, so cloudpickle would ship the function (and its globals) by value."""

    module: str
    qualname: str


def _by_name(fn: Any) -> _ByName | Any:
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or module == "__main__" or not qualname or "<locals>" in qualname:
        return fn
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return _ByName(module, qualname) if getattr(obj, "fn", None) is fn else fn


@functools.lru_cache(maxsize=1024)
def _resolve(ref: _ByName) -> Any:
    obj: Any = importlib.import_module(ref.module)
    for part in ref.qualname.split("."):
        obj = getattr(obj, part)
    return obj.fn


def _client(address: str) -> distributed.Client:
    try:
        return distributed.Client(address)
    except OSError as exc:  # distributed's TimeoutError is an OSError too
        raise ConnectionError(
            f"cannot connect to the Dask scheduler at {address!r}: {exc}") from exc


def _drop_outcome(waiter: asyncio.Future[Any]) -> None:
    if not waiter.cancelled():
        waiter.exception()  # retrieved, so asyncio does not log it as never retrieved


def _pack(tool: Tool, kwargs: dict[str, Any], label: str) -> bytes:
    """Pickle the call now, so that an unserialisable function or arg fails here, with a
    message naming the step, instead of deep inside distributed."""
    try:
        return cloudpickle.dumps((_by_name(tool.fn), kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        culprit = _unpicklable(tool.fn, kwargs)
        raise PermanentError(
            f"{label}: cannot send the call to the Dask cluster: {culprit} is not "
            f"serialisable ({type(exc).__name__}: {exc}); tools run on a cluster must be "
            "module-level functions (or closures over serialisable values) taking "
            "serialisable args", before_effect=True) from exc


def _unpicklable(fn: Any, kwargs: dict[str, Any]) -> str:
    for name, value in kwargs.items():
        try:
            cloudpickle.dumps(value)
        except Exception:
            return f"argument {name!r} ({type(value).__name__})"
    return f"the tool function {getattr(fn, '__qualname__', fn)!r}"


def _unpack(packed: bytes, label: str) -> Any:
    try:
        return cloudpickle.loads(packed)
    except Exception as exc:
        raise ToolError(f"{label}: cannot read the output sent back by the Dask worker "
                        f"({type(exc).__name__}: {exc})") from exc


def _call_on_worker(payload: bytes, label: str, claim: dict[str, Any]) -> bytes:
    """The task: unpickle the call, claim its attempt, run it, pickle the output (so an
    unserialisable output is reported as such, on every kind of cluster)."""
    fn, kwargs = cloudpickle.loads(payload)
    if isinstance(fn, _ByName):
        fn = _resolve(fn)
    claim_on_worker(claim, label)
    try:
        result = fn(**kwargs)
    except Exception as exc:
        if _round_trips(exc):
            raise
        raise _stand_in(exc) from None
    try:
        return cloudpickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise ToolError(
            f"{label}: the output ({type(result).__name__}) cannot be sent back from the Dask "
            f"worker: {type(exc).__name__}: {exc}; return plain data or a pydantic model"
        ) from None


def _round_trips(exc: BaseException) -> bool:
    try:
        pickle.loads(cloudpickle.dumps(exc))
    except Exception:
        return False
    return True


def _stand_in(exc: Exception) -> ToolError:
    """A picklable error that the runtime classifies like ``exc`` (an exception that cannot
    travel back, e.g. one whose ``__init__`` needs extra arguments)."""
    from chainlab.runtime.engine.attempt.call.seam import classify

    failure = classify(exc, tool_name="")
    stand_in = ToolError(failure.message, before_effect=failure.before_effect)
    stand_in.kind = str(failure.kind)
    return stand_in
