"""Where a model is asked: an OpenAI-compatible endpoint's configuration, shared by the
planner and agent steps (one place for the environment variables and the client's making).

Defaults come from the environment: ``OPENAI_MODEL``, ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``. The client for it is made in :mod:`chainlab.agent.openai` (the agent
layer's only module that imports ``openai``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["DEFAULT_URL", "PLACEHOLDER_KEY", "Endpoint", "host_of"]

#: where requests go without a base URL
DEFAULT_URL = "https://api.openai.com/v1"
#: the key sent to a server that needs none (a base URL given, no key)
PLACEHOLDER_KEY = "not-needed"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An OpenAI-compatible endpoint: ``model``, ``base_url``, ``api_key`` (never shown),
    the client's ``timeout`` (seconds) and ``max_retries``. Build it with
    :meth:`configure`, which fills what is not given from the environment."""

    model: str | None
    base_url: str | None
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 60.0
    max_retries: int = 2

    @classmethod
    def configure(cls, model: str | None = None, base_url: str | None = None,
                  api_key: str | None = None, *, timeout: float = 60.0,
                  max_retries: int = 2) -> Endpoint:
        """The endpoint with each of ``model`` / ``base_url`` / ``api_key`` not given taken
        from ``OPENAI_MODEL`` / ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``."""
        return cls(model or os.environ.get("OPENAI_MODEL") or None,
                   base_url or os.environ.get("OPENAI_BASE_URL") or None,
                   api_key or os.environ.get("OPENAI_API_KEY") or None, timeout, max_retries)

    @property
    def url(self) -> str:
        """The base URL requests go to."""
        return self.base_url or DEFAULT_URL

    @property
    def host(self) -> str:
        """The endpoint's host (and port), never its credentials or path."""
        return host_of(self.url)

    def not_configured(self, *, has_client: bool = False) -> str | None:
        """Why the model cannot be asked, or None when it can (``has_client``: a client was
        handed in, so no key or URL is needed)."""
        if not self.model:
            return "no model: pass model=... or set OPENAI_MODEL"
        if not has_client and not (self.api_key or self.base_url):
            return ("no endpoint: set OPENAI_API_KEY for api.openai.com, or OPENAI_BASE_URL "
                    "(or base_url=...) for an OpenAI-compatible server")
        return None


def host_of(url: str) -> str:
    """A URL's host (and port), never its credentials or path."""
    parts = urlsplit(url)
    host = parts.hostname or url
    return f"{host}:{parts.port}" if parts.port else host
