"""Where a model is asked: an OpenAI-compatible endpoint's configuration, shared by the
planner and agent steps (one place for the environment variables and the client's making).

Defaults come from the environment: ``OPENAI_MODEL``, ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``. The client for it is made in :mod:`chainlab.agent.openai` (the agent
layer's only module that imports ``openai``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

from chainlab.errors import CredentialInURLError

__all__ = ["CREDENTIAL_NAMES", "CREDENTIAL_WORDS", "DEFAULT_URL", "PLACEHOLDER_KEY",
           "Endpoint", "check_base_url", "credential_in", "host_of"]

#: where requests go without a base URL
DEFAULT_URL = "https://api.openai.com/v1"
#: the key sent to a server that needs none (a base URL given, no key)
PLACEHOLDER_KEY = "not-needed"
#: a query parameter whose name holds one of these (case, ``-``, ``_`` and ``.`` aside:
#: ``api-key``, ``API_KEY``, ``subscription-key``, ``access_token``, ``client_secret``,
#: ``X-Amz-Signature``, ``authorization``) carries a credential
CREDENTIAL_WORDS = ("key", "token", "secret", "signature", "password", "passwd",
                    "credential", "auth")
#: ... and so does one named exactly one of these (an Azure SAS's ``sig``, an Azure
#: Function's ``code``)
CREDENTIAL_NAMES = frozenset({"sig", "pwd", "pass", "code"})


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

    def __post_init__(self) -> None:
        if self.base_url is not None:
            check_base_url(self.base_url)

    @classmethod
    def configure(cls, model: str | None = None, base_url: str | None = None,
                  api_key: str | None = None, *, timeout: float = 60.0,
                  max_retries: int = 2) -> Endpoint:
        """The endpoint with each of ``model`` / ``base_url`` / ``api_key`` not given taken
        from ``OPENAI_MODEL`` / ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``. Raises
        CredentialInURLError for a base URL (given or from the environment) that carries a
        credential (:func:`check_base_url`)."""
        if base_url:
            check_base_url(base_url)
        else:
            base_url = os.environ.get("OPENAI_BASE_URL") or None
            if base_url is not None:
                check_base_url(base_url, "OPENAI_BASE_URL")
        return cls(model or os.environ.get("OPENAI_MODEL") or None, base_url,
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


def credential_in(url: str) -> str | None:
    """What credential ``url`` carries, said without its value (``"user-info"``, ``"the
    query parameter 'api-key'"``), or None. A query parameter carries one when its name,
    lowercased with ``-``, ``_`` and ``.`` left out, holds one of :data:`CREDENTIAL_WORDS`
    or is one of :data:`CREDENTIAL_NAMES`. A text that cannot be read as a URL is not
    trusted either."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not one)
    except ValueError:
        return "a text that cannot be read as a URL, so it may hold one"
    if "@" in parts.netloc:
        return "user-info before '@'"
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        plain = re.sub(r"[-_.\s]", "", name.lower())
        if plain in CREDENTIAL_NAMES or any(word in plain for word in CREDENTIAL_WORDS):
            return f"the query parameter {name[:40]!r}"
    return None


def check_base_url(url: str, where: str = "base_url") -> str:
    """``url`` when it carries no credential (:func:`credential_in`); the one check every
    door that takes a model's base URL goes through (``where`` names the door in the
    message). Raises CredentialInURLError, whose message never holds the URL."""
    found = credential_in(url)
    if found is not None:
        raise CredentialInURLError(where, found)
    return url
