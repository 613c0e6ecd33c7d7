"""OpenTelemetry traces of runs, in the GenAI semantic conventions (DESIGN §24; ``pip install
"chainlab[otel]"``).

``Runtime(..., tracer_provider=tp)`` traces every run it drives with ``tp``; without one, a
runtime uses OpenTelemetry's global provider when the application configured one (an SDK
provider set with ``trace.set_tracer_provider``) and traces nothing otherwise: then no
OpenTelemetry module is even imported, and a run costs what it costs untraced.

* :mod:`chainlab.tracing.context`: a run's place in its trace, kept with the run (pure
  stdlib: the HTTP service parses an incoming ``traceparent`` with it);
* :mod:`chainlab.tracing.spans`: the spans, made from the run's events by a subscriber on
  the driving side (imports OpenTelemetry);
* :mod:`chainlab.tracing.otlp`: the OTLP/HTTP exporter the command line configures
  (``--otlp URL``, the ``OTEL_EXPORTER_OTLP_*`` variables), which drops spans with one
  warning while its endpoint is down.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chainlab.tracing.context import TRACEPARENT_META, parse_traceparent, run_trace

if TYPE_CHECKING:
    from chainlab.tracing.tracer import Tracing

__all__ = ["ENDPOINT_VARS", "TRACEPARENT_META", "otlp_wanted", "parse_traceparent",
           "run_trace", "tracing_for"]

#: the standard variables that name an OTLP collector for traces
ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def otlp_wanted(url: str | None) -> bool:
    """Whether spans go to a collector: ``url`` is given, or a standard variable names one."""
    return url is not None or any(os.environ.get(v) for v in ENDPOINT_VARS)


def tracing_for(provider: Any = None, *, capture_content: bool = False,
                redact: Callable[[Any], Any] | None = None) -> Tracing | None:
    """How a runtime traces its runs: with ``provider``; with the global provider when
    ``provider`` is None and the application configured one; not at all when ``provider``
    is False or nothing is configured (None: then nothing of OpenTelemetry is imported).

    Raises ImportError naming the extra when ``provider`` is given and OpenTelemetry is not
    installed."""
    if provider is False:
        return None
    if provider is None:
        provider = _configured_global()
        if provider is None:
            return None
    try:
        from chainlab.tracing.tracer import Tracing
    except ImportError as exc:  # pragma: no cover - the extra is part of dev
        raise ImportError(f"tracing needs OpenTelemetry ({exc}): pip install "
                          "'chainlab[otel]'") from None
    return Tracing(provider, capture_content=capture_content, redact=redact)


def _configured_global() -> Any:
    """The global tracer provider when the application set a real one, else None. Looks at
    OpenTelemetry only when the application already imported it (no cost otherwise)."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    provider = api.get_tracer_provider()
    if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
        return None
    return provider
