"""Where each spec entry goes in one source file: parse it once (``context``), match the entry's
selectors, check the names its expressions bind where they run, and plan it, placed or failed with
its own diagnostics; plus the stripping of generated and hand-written instrumentation before."""
