"""Defaults a user sees in the command line's help and the API alike. A leaf without torch, so
``fxroof --help`` answers before torch is imported."""
DEFAULT_MODEL = "resnet18"
DEFAULT_IMAGE_SIZE = 224  # pixels, when a model names no native resolution
DEFAULT_SEQ_LEN = 128     # tokens per sequence of hf: text models
