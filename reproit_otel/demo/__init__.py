"""``reproit-otel demo``: :mod:`.run` drives the stages, :mod:`.support` holds its parts.

Tools only: nothing in the SDK imports this package.
"""
