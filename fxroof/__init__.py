"""fxroof: where the time goes in a PyTorch model, and why.

>>> g = fxroof.analyze(torchvision.models.resnet50(), torch.randn(64, 3, 224, 224), backward=True)
>>> print(g.table(top=20)); print(g.breakdown("layer_type")); g.to_json("r50.json")
>>> g.roofline("h100_sxm"); fxroof.plot_roofline([g, "vit_b_16"], ["t4", "h100_sxm"], "r.png")
"""
__version__ = "0.1.0"

from fxroof.errors import FxroofError  # noqa: E402
from fxroof.analyze import analyze  # noqa: E402
from fxroof.graph import AnnotatedGraph, ModelInfo  # noqa: E402
from fxroof.compile_backend import Backend, backend  # noqa: E402
from fxroof.roofline_points import plot_roofline  # noqa: E402

__all__ = ["analyze", "backend", "Backend", "AnnotatedGraph", "ModelInfo", "FxroofError",
           "plot_roofline", "__version__"]
