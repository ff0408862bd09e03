"""The inference server's and the dynamic engine's instrumented modules (issue 40, specs/inference.yaml
and specs/inference_engine.yaml): what every way in (the patch set, the fork, in place, replace
mode on main, the installed wheel) must cover, and how their instrumented text reads."""

from __future__ import annotations

SERVER = "megatron/core/inference/text_generation_server/dynamic_text_gen_server/"
SERVING_FILES = (
    SERVER + "text_generation_server.py",
    SERVER + "endpoints/completions.py",
    SERVER + "endpoints/chat_completions.py",
    "megatron/core/inference/engines/dynamic_engine.py",
)
# a call each file carries once instrumented, its own (not only the runtime's import)
CALLS = {
    SERVING_FILES[0]: "_otel.serve_app(app)",
    SERVING_FILES[1]: '@_otel.traced("text_completion")',
    SERVING_FILES[2]: '@_otel.traced("chat")',
    SERVING_FILES[3]: '@_otel.traced("megatron.inference.step")',
}


def instrumented(path: str, text: str) -> bool:
    """Whether ``text`` is ``path``'s instrumented text: the runtime imported, the file's call there."""
    return "import megatron.core.otel as _otel" in text and CALLS[path] in text
