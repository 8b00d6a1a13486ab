"""Is the store intact: ``validate`` (``validation``), what its findings mean for a user
(``assess``) and ``repair``, all working on a whole :class:`~store.core.Store`, above it. The
metadata copies and digests they compare are :mod:`store.metadata`, near the bottom.

This ``__init__`` imports nothing: import the modules (``from store.integrity.validation import
validate``, or ``from store import validate``).
"""
