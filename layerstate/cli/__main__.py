"""``python -m layerstate.cli``: the ``layerstate`` command."""

import sys

from layerstate.cli import main

sys.exit(main())
