"""`python -m screener.cli` (used by tests and hooks that run the module directly)."""

import sys

from screener.cli import main

sys.exit(main())
