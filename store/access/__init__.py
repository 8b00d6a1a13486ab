"""Where a store lives and who may write it: the location (directory, zip, fsspec URL), the
leases that let one writer per run and one consolidation at a time go on across processes,
hosts and object stores, and the results store paired with a read-only source.

Imports nothing itself: import the modules (``from store.access.lease import RunLease``).
"""
