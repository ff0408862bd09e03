"""The README's pre-commit configuration, as the in-place tests run its hook."""

from __future__ import annotations

HOOK_ARGS = ["specs/", "--docs", "docs/otel"]  # the README's pre-commit configuration passes these
