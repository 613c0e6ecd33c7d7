"""Griffe extension for the API reference: docstrings written for the console read well on
the site too.

chainlab's docstrings use Sphinx roles (``:class:`Run```, ``:meth:`~Runtime.resume```) that
Markdown would print literally; they become code spans of the short name. A pointer into
the design notes that live outside this repository ("DESIGN §13") becomes a pointer to the
concepts page of this site that explains the same thing in the project's words.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj):`~?([^`]+)`")
DESIGN = re.compile(r"DESIGN (§\d+(?:-§\d+)?)")
# design-note sections -> the concepts page that explains them
CONCEPTS = {
    "§2": "The plan", "§3": "The plan", "§4": "Scheduling and release order",
    "§5": "Attempts, retries and in_doubt", "§6": "Confirmation, suspend and resume",
    "§7": "Durability, recovery and fencing", "§8": "The saga and compensation",
    "§9": "Durability, recovery and fencing", "§11": "Time travel, fork and replay",
    "§12": "Scheduling and release order", "§13": "Stores, SQLite and PostgreSQL",
    "§6-§8": "Confirmation; Attempts; The saga",
}


def clean(text: str) -> str:
    """``text`` with Sphinx roles as code spans and design-note pointers as concept pages."""
    text = ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    return DESIGN.sub(lambda m: f"Concepts: {CONCEPTS.get(m.group(1), 'Concepts')}", text)


class ConsoleDocstrings(griffe.Extension):
    """Rewrites every loaded docstring with :func:`clean`."""

    def on_instance(self, *, obj: griffe.Object, **_: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = clean(obj.docstring.value)
