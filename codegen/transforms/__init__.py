"""The libcst transforms that write a plan into a source file: span blocks and hooks, wrap hooks,
streams, and the one runtime import, every line laid out by ``codegen/layout.py``."""
