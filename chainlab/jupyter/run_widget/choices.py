"""Options of a dropdown that follow a changing list (the step-through ``next`` dropdown)."""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as W

__all__ = ["set_choices"]


def set_choices(dropdown: W.Dropdown, choices: Sequence[str]) -> None:
    """Show ``choices`` in this order, keeping the chosen value while it is still offered,
    else choosing the first (ipywidgets 8 leaves a dropdown whose options were set after it
    was made with none at ``value=None``: an empty box, issue 18); a no-op when unchanged."""
    choices = tuple(choices)
    current = dropdown.value
    value = current if current in choices else (choices[0] if choices else None)
    if tuple(dropdown.options) == choices and dropdown.value == value:
        return
    if tuple(dropdown.options) != choices:
        dropdown.options = choices  # (value and options cannot be set together: validation)
    if dropdown.value != value:
        dropdown.value = value
