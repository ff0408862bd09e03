"""``python -m codegen``: the same command line as the ``codegen`` console script."""

import sys

from codegen.cli import main

sys.exit(main())
