"""Who a request is (DESIGN §21): ``chainlab serve --tokens FILE`` maps bearer tokens to a
:class:`Principal` (a name and roles). A token is compared in constant time against every
entry (no early exit), never logged, never stored: a decision records the principal's name.

The file is JSON: ``[{"token": "...", "principal": "alice", "roles": ["finance"]}, ...]``.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chainlab.errors import UsageError

__all__ = ["Principal", "load_tokens", "match"]


@dataclass(frozen=True, slots=True)
class Principal:
    """A named caller and its roles (a tool's ``approvers`` name roles)."""

    name: str
    roles: tuple[str, ...] = ()

    def __repr__(self) -> str:  # (no token in it: there is none to show)
        return f"Principal({self.name!r}, roles={list(self.roles)!r})"


def load_tokens(path: str | Path) -> dict[bytes, Principal]:
    """The token table of ``path``. Raises UsageError naming the entry and the fix (never
    the token itself)."""
    p = Path(path)
    try:
        data: Any = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--tokens {str(p)!r} cannot be read as JSON: {type(exc).__name__}",
                         hint='write [{"token": "...", "principal": "alice", "roles": '
                              '["finance"]}]') from None
    if not isinstance(data, list):
        raise UsageError(f"--tokens {str(p)!r} must hold a JSON list of entries",
                         hint='[{"token": "...", "principal": "alice", "roles": ["finance"]}]')
    table: dict[bytes, Principal] = {}
    for i, entry in enumerate(data):
        token = entry.get("token") if isinstance(entry, dict) else None
        name = entry.get("principal") if isinstance(entry, dict) else None
        roles = entry.get("roles", []) if isinstance(entry, dict) else None
        if not (isinstance(token, str) and len(token.strip()) >= 16 and isinstance(name, str)
                and name and isinstance(roles, list) and all(isinstance(r, str) for r in roles)):
            raise UsageError(f"--tokens {str(p)!r}: entry {i} needs a token (16 characters at "
                             "least), a principal name and a list of roles",
                             hint='{"token": "...", "principal": "alice", "roles": ["finance"]}')
        key = token.strip().encode()
        if key in table:
            raise UsageError(f"--tokens {str(p)!r}: entry {i} repeats the token of "
                             f"{table[key].name!r}", hint="give each principal its own token")
        table[key] = Principal(name, tuple(roles))
    return table


def match(given: bytes, table: dict[bytes, Principal]) -> Principal | None:
    """The principal whose token is ``given``: every entry compared in constant time."""
    found = None
    for token, principal in table.items():
        if hmac.compare_digest(given, token) and found is None:
            found = principal
    return found
