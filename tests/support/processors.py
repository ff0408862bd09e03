"""Span processors the runtime tests watch the SDK through."""

from __future__ import annotations

from opentelemetry.sdk.trace import SpanProcessor


class Counting(SpanProcessor):
    """Counts SDK spans started and ended."""

    def __init__(self) -> None:
        self.started = 0
        self.ended = 0

    def on_start(self, span: object, parent_context: object = None) -> None:
        self.started += 1

    def on_end(self, span: object) -> None:
        self.ended += 1
