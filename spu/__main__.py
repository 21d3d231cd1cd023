"""``python -m spu`` is the ``spu`` console script."""

import sys

from spu.cli import main

sys.exit(main())
