"""What a generation writes: the patches (git-compatible), the output trees and their comparison,
the taxonomy docs pages, the coverage report, the semantic-convention registry, the runtime package
copied with its generated ``_taxonomy.py``, and the runtime and instrumentation wheels."""
