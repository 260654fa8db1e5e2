"""timm models by name, built untrained on the meta device: ``timm:convnext_tiny``.

timm is an optional extra (``pip install fxroof[timm]``). Each timm model carries its native
input size in ``pretrained_cfg["input_size"]`` (read from the config, no weights fetched), which
``fxroof.models.default_input_shape`` uses.
"""
from __future__ import annotations

from torch import nn

from fxroof.errors import FxroofError
from fxroof.models.base import construct
from fxroof.suggest import did_you_mean


def _timm():
    try:
        import timm
    except ImportError:
        raise FxroofError("timm: models need the timm package, an optional extra: "
                          "pip install 'fxroof[timm]' (or pip install timm).") from None
    return timm


def names() -> list[str]:
    """The architectures the installed timm can build ([] without timm)."""
    try:
        import timm
    except ImportError:
        return []
    return timm.list_models()


def knows(name: str) -> bool:
    """Whether the installed timm (if any) can build this model."""
    return name in names()


def build(name: str, device: str = "meta") -> nn.Module:
    timm = _timm()
    if name not in timm.list_models():
        hint = did_you_mean(name, timm.list_models(), n=5, cutoff=0.6)
        raise FxroofError(
            f"Unknown timm model '{name}'.{hint} `python -c \"import timm; "
            "print(timm.list_models())\"` lists the architectures timm can build.")
    return construct(lambda: timm.create_model(name, pretrained=False), device)
