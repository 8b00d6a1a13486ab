"""A store between places: ``pack``/``unpack`` (one zip every reader opens) and
``transfer`` (``pull``/``push`` of a subset between locations, checked and resumable; its
plan, its chunks, its resumption marker and its two ends in ``transfer_*``).

Imports nothing itself: import the modules (``from store.sharing.transfer import pull``).
"""
