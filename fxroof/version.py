"""fxroof's version: a leaf, so exports can stamp it without importing the package root."""
__version__ = "0.2.0"
