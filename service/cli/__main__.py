"""``python -m service.cli``: the ``pgcontext`` command without its console script."""

import sys

from service.cli.main import main

sys.exit(main())
