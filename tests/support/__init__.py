"""What the tests share: builders and readers of captures, the CLI and doc-block runners, the
Megatron worker set-ups, paths. Test modules import from here, never from one another or from a
conftest (fixtures stay in conftests, where pytest finds them without an import)."""
