"""The state module the reference's guards import inside the function (nemo.lens.state there)."""

ENABLED_GROUPS: frozenset = frozenset()
