"""The toolbox a real ``chainlab serve`` subprocess serves in these tests: ``refund``, which
only the ``finance`` role may approve."""

from __future__ import annotations

from typing import Any

from chainlab import Toolbox

toolbox = Toolbox("refunds-served")


@toolbox.tool(side_effects=True, requires_confirmation=True, approvers=["finance"])
def refund(amount: float, currency: str = "EUR") -> dict[str, Any]:
    """Refund ``amount``."""
    return {"refunded": amount}
