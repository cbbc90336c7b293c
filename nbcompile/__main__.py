"""``python -m nbcompile run NOTEBOOK [--html OUT]``."""

import sys

from .runner import main

sys.exit(main())
