"""torchvision's classification models by name (``resnet50``), untrained, on the meta device."""
from __future__ import annotations

from typing import Optional

import torchvision
from torch import nn

from fxroof.errors import FxroofError
from fxroof.models.base import construct
from fxroof.suggest import did_you_mean


def names() -> list[str]:
    return sorted(torchvision.models.list_models(module=torchvision.models))


def unknown(name: str, hint: str) -> FxroofError:
    return FxroofError(
        f"Unknown model '{name}'.{hint} fxroof knows the {len(names())} torchvision "
        "classification models by name, Hugging Face models as hf:<model_type> (e.g. hf:gpt2, "
        "hf:bert), timm models as timm:<name>, and your own as 'package.module:callable' "
        "returning an nn.Module; `fxroof models` lists them.")


def build(name: str, device: str = "meta") -> nn.Module:
    known = names()
    if name not in known:
        raise unknown(name, did_you_mean(name, known, n=5))
    return construct(lambda: torchvision.models.get_model(name), device)


def crop_size(name: str) -> Optional[int]:
    """The input resolution of the model's torchvision weights (their transforms' crop)."""
    try:
        transforms = torchvision.models.get_model_weights(name).DEFAULT.transforms
        return transforms.keywords.get("crop_size")
    except Exception:  # no weights enum for this model: no native resolution known
        return None
