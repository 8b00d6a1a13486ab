"""The former name of :mod:`store.io.blocks` (the block pipeline of a length writer), kept so
that code importing ``store.pipeline`` gets that same module (patches included); the
pipeline of a whole experiment is :mod:`layerstate.executor`."""

import sys

from store.io import blocks

sys.modules[__name__] = blocks
