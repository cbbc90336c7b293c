"""``python -m nbcompile run NOTEBOOK [--html OUT] [--json OUT] [--allow-errors]``."""

import sys

from .runner import main

sys.exit(main())
