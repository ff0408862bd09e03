"""``MegatronInstrumentor``: ``instrument()`` weaves every megatron module imported afterwards,
``uninstrument()`` stops weaving later imports and turns the runtime's groups off."""

from __future__ import annotations

import logging
import sys
from collections.abc import Collection
from importlib import metadata
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]  # the package ships no py.typed re-export

from . import _finder
from ._version import MEGATRON_CORE_REQUIREMENT

_LOG = logging.getLogger(__name__)


class MegatronInstrumentor(BaseInstrumentor):  # type: ignore[misc]  # BaseInstrumentor is untyped to mypy
    def instrumentation_dependencies(self) -> Collection[str]:
        """The supported megatron-core releases, when megatron-core is an installed distribution.
        A Megatron-LM checkout on ``PYTHONPATH`` has no distribution metadata to check: the
        finder checks every file's bytes instead, so it asks for nothing then."""
        try:
            metadata.version("megatron-core")
        except metadata.PackageNotFoundError:
            return ()
        return (MEGATRON_CORE_REQUIREMENT,)

    def _instrument(self, **kwargs: Any) -> None:
        finder = _finder.install()
        early = sorted(m for m in finder.modules if m in sys.modules and m not in finder.served)
        if early:
            _LOG.warning(
                "megatron modules imported before instrument() are not instrumented: %s "
                "(call instrument() first, or run under opentelemetry-instrument)",
                ", ".join(early),
            )

    def _uninstrument(self, **kwargs: Any) -> None:
        _finder.uninstall()
        runtime = sys.modules.get(_finder.RUNTIME_MODULE)
        disable = getattr(runtime, "disable", None)
        if callable(disable):
            try:
                disable()
            except Exception:  # noqa: BLE001  # telemetry never breaks training
                _LOG.debug("the runtime's disable() failed", exc_info=True)
