"""Which module is running: global module hooks keep a stack of the modules whose forward is
executing, so each recorded op knows its module path and layer type."""
from __future__ import annotations

import contextlib
from typing import NamedTuple, Optional

from torch import nn


class ModuleInfo(NamedTuple):
    path: str        # "layer3.1.conv2"; "" for the root module
    cls: str         # "Conv2d"
    owns_ops: bool   # True when this module's own forward is a layer (see layer_type_of)


def op_family(op) -> str:
    """``aten._adaptive_avg_pool2d.default`` -> ``adaptive_avg_pool2d``; in-place -> functional."""
    name = getattr(op, "overloadpacket", op).__name__
    return name.strip("_") or name


class ModuleScope:
    """Context manager: while active, ``current`` is the innermost running module's info.

    A module counts as a layer of its own ("owns" its ops) when it has no submodules or holds
    parameters/buffers directly (MultiheadAttention, a ViT encoder with a position embedding).
    Ops in the forward of a pure container (a ResNet Bottleneck's residual add) are typed by
    the op itself ("add"), which is what a per-layer-type breakdown should show for them.

    The post-hook deliberately does not run when a forward raises, so after a failure
    ``current`` still names the module that rejected its input.
    """

    def __init__(self, root: nn.Module):
        self._info: dict[int, ModuleInfo] = {}
        for path, module in root.named_modules(remove_duplicate=False):
            owns = not any(True for _ in module.children()) or any(
                True for _ in module.parameters(recurse=False)) or any(
                True for _ in module.buffers(recurse=False))
            self._info.setdefault(id(module), ModuleInfo(path, type(module).__name__, owns))
        self._class_by_path = {info.path: info.cls for info in self._info.values()}
        self.stack: list[ModuleInfo] = []
        self._handles = []

    def __enter__(self):
        self._handles = [
            nn.modules.module.register_module_forward_pre_hook(self._push),
            nn.modules.module.register_module_forward_hook(self._pop),
        ]
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def class_of(self, path: str) -> str:
        """The class name of the module at ``path`` ("" for none)."""
        return self._class_by_path.get(path, "")

    @contextlib.contextmanager
    def region(self, path: str, cls: str):
        """Ops run inside are attributed to a pseudo-layer (the loss) as if a module ran."""
        self.stack.append(ModuleInfo(path, cls, True))
        try:
            yield
        finally:
            self.stack.pop()

    @property
    def current(self) -> Optional[ModuleInfo]:
        return self.stack[-1] if self.stack else None

    def _push(self, module, args):
        info = self._info.get(id(module))
        if info is None:  # a module built during forward: name it under its parent
            parent = self.current.path if self.current else ""
            cls = type(module).__name__
            info = ModuleInfo(f"{parent}.<{cls}>" if parent else f"<{cls}>", cls, True)
        self.stack.append(info)

    def _pop(self, module, args, output):
        if self.stack:
            self.stack.pop()

    def layer_type_of(self, op) -> str:
        info = self.current
        return info.cls if info is not None and info.owns_ops else op_family(op)
