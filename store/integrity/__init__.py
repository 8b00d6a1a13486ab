"""Is the store intact: the two copies of every node's metadata and their digests
(``digests``, ``damage``, ``metadata``), ``validate`` (``validation``) and ``repair``.

Its two halves sit at both ends of the package: the metadata modules are near the bottom
(every location reads through their guarded stores), while ``validation`` and ``repair``
work on a whole :class:`~store.core.Store`. So this ``__init__`` imports nothing: import the
modules (``from store.integrity.validation import validate``, or ``from store import validate``).
"""
