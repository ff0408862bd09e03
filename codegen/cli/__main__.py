"""``python -m codegen.cli``: the ``codegen`` console script."""

import sys

from codegen.cli import main

sys.exit(main())
