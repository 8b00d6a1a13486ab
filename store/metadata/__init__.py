"""The two copies of every node's metadata and their digests, near the bottom of the store
(every location reads through their guarded stores):

* :mod:`store.metadata.digests`: documents and their digests (``canonical``, ``digest``,
  ``document_problem``), raw access, the guarded zarr stores that refuse a damaged
  ``zarr.json`` with a :class:`~store.errors.MetadataDamagedError`, the copy file and
  ``consolidate_once``;
* :mod:`store.metadata.damage`: ``check``, the comparison of every node with its snapshot copy
  and digest that ``validate`` reports and ``repair`` acts on (:mod:`store.integrity`), and
  ``root_damage`` / ``root_changed`` for a store that fails to open.

This ``__init__`` imports nothing: import the modules. The format: docs/store-format.md,
"Metadata copies and digests".
"""
