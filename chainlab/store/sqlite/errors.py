"""The ONE place where sqlite3's errors about the file become chainlab's
(:func:`_fault`): read-only, corrupt, locked or unavailable, each with the file and the fix."""

from __future__ import annotations

import shlex
import sqlite3
from pathlib import Path

from chainlab.errors import StoreFileError

__all__: list[str] = []


def _fault(exc: sqlite3.Error, path: str) -> StoreFileError | None:
    """The one place where sqlite3 errors about the FILE become chainlab's, naming the file
    and the fix (``__cause__`` is ``exc``, also when the writer thread only records it);
    None for other errors (a bad query, a constraint), which callers word themselves."""
    fault = _file_fault(exc, path)
    if fault is not None:
        fault.__cause__ = exc
    return fault


def _file_fault(exc: sqlite3.Error, path: str) -> StoreFileError | None:
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    folder = shlex.quote(str(Path(path).parent))
    if name.startswith("SQLITE_READONLY"):
        fix = (f"make its directory writable: chmod u+w {folder}"
               if name == "SQLITE_READONLY_DIRECTORY" else
               f"make it writable: chmod u+w {shlex.quote(path)} (and its directory {folder}, "
               "which holds the -wal and -shm files)")
        return StoreFileError(path, "readonly", f"cannot write to {path!r} ({text})", fix)
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return StoreFileError(path, "corrupt", f"{path!r} is damaged ({text})",
                              "the file is corrupt: move it away and start a new store, or "
                              "restore a backup")
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return StoreFileError(path, "locked", f"{path!r} is locked ({text}): another process "
                              "kept a write transaction open", "let it finish (or stop it), "
                              "then try again")
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_FULL", "SQLITE_IOERR", "SQLITE_PERM")):
        return StoreFileError(path, "unavailable", f"cannot use {path!r} ({text})",
                              "check that the disk has space and that you may read and write "
                              f"the file and its directory {folder}")
    return None
