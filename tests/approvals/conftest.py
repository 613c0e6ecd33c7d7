"""Refunds of different amounts, decided by rules, grants and people (DESIGN §21)."""

from __future__ import annotations

from typing import Any

import pytest

from chainlab import Chain, Toolbox


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def refunds_toolbox(calls: list[dict[str, Any]] | None = None, **meta: Any) -> Toolbox:
    """``refund(amount, currency)``: records each call in ``calls``; it asks a person by
    default (``requires_confirmation``)."""
    tb = Toolbox("refunds")
    made = calls if calls is not None else []

    @tb.tool(side_effects=True, requires_confirmation=True, **meta)
    def refund(amount: float, currency: str = "EUR") -> dict[str, Any]:
        """Refund ``amount`` to the customer."""
        made.append({"amount": amount, "currency": currency})
        return {"refunded": amount}

    @tb.tool
    def lookup(order: str) -> dict[str, Any]:
        """Read an order (no side effects, no confirmation)."""
        return {"order": order}

    return tb


def refunds_chain(amounts: list[float], **options: Any) -> Chain:
    """One for_each step refunding each amount (``context.amounts``)."""
    return Chain.from_dict({
        "name": "refunds",
        "inputs": {"amounts": {"type": "array", "default": amounts}},
        "steps": [{"id": "pay", "tool": "refund", "for_each": "{{ context.amounts }}",
                   "args": {"amount": "{{ item }}"}}],
        "options": options,
    })


def by_of(state: Any) -> dict[str, str | None]:
    """Who decided each step: ``{step_id: by}`` (None: nobody)."""
    return {sid: (st.decided or {}).get("by") for sid, st in state.steps.items()}
