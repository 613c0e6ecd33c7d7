"""The HTTP service (``chainlab serve``) and its client: ``pip install "chainlab[server]"``.

* :func:`create_app` (:mod:`chainlab.http.app`): the ASGI app, on Starlette, served by
  uvicorn, with Server-Sent Events from sse-starlette;
* :class:`Config`: its limits and options; :func:`new_token`: a bearer token;
* :class:`Client` (:mod:`chainlab.http.client`): start, stream (reconnecting from the last
  seq), read, decide, resume, from any Python program, on httpx and httpx-sse;
* :class:`ApiError`: every error response, on both sides.

This package is the only one importing starlette, uvicorn and sse_starlette, and its
client the only one importing httpx and httpx_sse. Each part loads only what it needs: a
program that only uses the Client needs neither Starlette nor uvicorn.
"""

from __future__ import annotations

import importlib
import secrets
from typing import TYPE_CHECKING, Any

from chainlab.errors import MissingExtraError

if TYPE_CHECKING:
    from chainlab.http.app import create_app
    from chainlab.http.client import Client, StreamEvent
    from chainlab.http.errors import ApiError
    from chainlab.http.service import Config

__all__ = ["ApiError", "Client", "Config", "StreamEvent", "create_app", "new_token"]

_LAZY = {"create_app": "chainlab.http.app", "Client": "chainlab.http.client",
         "StreamEvent": "chainlab.http.client", "Config": "chainlab.http.service",
         "ApiError": "chainlab.http.errors"}
_PACKAGES = {"starlette": "starlette", "sse_starlette": "sse-starlette",
             "uvicorn": "uvicorn", "httpx": "httpx", "httpx_sse": "httpx-sse"}


def new_token() -> str:
    """A fresh bearer token (32 random bytes, URL-safe text)."""
    return secrets.token_urlsafe(32)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'chainlab.http' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        package = _PACKAGES.get((exc.name or "").split(".")[0])
        if package is None:
            raise
        raise MissingExtraError(package, "server", f"chainlab.http.{name}") from None
    globals()[name] = value
    return value
