"""The target of a node in the compiled view (fxroof.compiled): one kernel Inductor would run.

It stands where an ``OpOverload`` stands in an eager graph, and answers the same questions the
records ask of a target (``str(target)``, ``target.overloadpacket.__name__``), so every view,
rollup and renderer reads a compiled view as it reads an eager one.
"""
from __future__ import annotations

from fxroof.errors import FxroofError


class Kernel:
    def __init__(self, name: str, extern: bool):
        self.__name__ = name   # "convolution" (extern), "fused_add_mul_relu" (generated)
        self.extern = extern   # a library or fallback kernel, not one Inductor generates

    @property
    def overloadpacket(self) -> "Kernel":
        return self

    def __str__(self) -> str:
        return f"inductor.{'extern' if self.extern else 'kernel'}.{self.__name__}"

    __repr__ = __str__

    def __call__(self, *args, **kwargs):
        raise FxroofError("A compiled-view node describes a kernel Inductor would run; it has "
                          "no implementation to call. Time the model with torch.compile.")
