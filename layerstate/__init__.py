"""layerstate: capture sequence-model activations once, analyse them offline with honest statistics."""

__version__ = "0.1.0"
