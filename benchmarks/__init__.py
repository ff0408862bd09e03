"""Runtime overhead and generator speed, reported as same-run ratios (not part of the tests)."""
