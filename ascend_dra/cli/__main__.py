"""``python -m ascend_dra.cli``: the ``ascend-dra`` command."""

import sys

from ascend_dra.cli.main import main

sys.exit(main())
