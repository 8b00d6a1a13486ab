"""The activations: length groups written block by block (layout, checked inputs, whole-chunk
encoding, the fsynced block pipeline, the resumable writer) and read lazily or whole.

Imports nothing itself: import the modules (``from store.io.writer import LengthWriter``).
"""
