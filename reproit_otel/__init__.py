"""reproit-otel: reproducible production failures from OpenTelemetry."""

from __future__ import annotations

from reproit_otel._version import __version__

__all__ = ["__version__"]
