"""``python -m orchestrator.cli``: the ``skillog`` command without its console script."""

import sys

from ._main import main

sys.exit(main())
