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

    def __init__(self, root: Optional[nn.Module] = None):
        """``root``: the model whose modules are named from it; None (fxroof.record) names
        each module that runs outside any other from its own class, as it first runs."""
        self._info: dict[int, ModuleInfo] = {}
        self._class_by_path: dict[str, str] = {}
        self.tensor_names: dict[int, tuple[str, str]] = {}  # id -> ("parameter"|"buffer", fqn)
        self.roots: list[nn.Module] = []
        self._discover = root is None
        if root is not None:
            self.add_root(root)
        self.stack: list[ModuleInfo] = []
        self._handles = []

    def add_root(self, root: nn.Module, prefix: str = "") -> None:
        """Name ``root``'s modules, parameters and buffers, under ``prefix``."""
        self.roots.append(root)
        for path, module in root.named_modules(remove_duplicate=False, prefix=prefix):
            owns = not any(True for _ in module.children()) or any(
                True for _ in module.parameters(recurse=False)) or any(
                True for _ in module.buffers(recurse=False))
            self._info.setdefault(id(module), ModuleInfo(path, type(module).__name__, owns))
            self._class_by_path.setdefault(path, type(module).__name__)
        for kind, named in (("parameter", root.named_parameters(prefix=prefix)),
                            ("buffer", root.named_buffers(prefix=prefix))):
            for fqn, t in named:
                self.tensor_names.setdefault(id(t), (kind, fqn))

    def _first_run(self, module: nn.Module) -> None:
        """A module running outside any other, met while recording a user's own code: the
        first is the model (paths as usual), later ones (a loss module, a second model) are
        named by their class."""
        prefix = ""
        if self.roots:
            base = prefix = type(module).__name__
            n = 1
            while prefix in self._class_by_path:
                n += 1
                prefix = f"{base}_{n}"
        self.add_root(module, prefix)

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
        if self._discover and not self.stack and id(module) not in self._info:
            self._first_run(module)
        info = self._info.get(id(module))
        if info is None:  # a module built during forward: name it under its parent
            parent = self.current.path if self.current else ""
            cls = type(module).__name__
            info = ModuleInfo(unregistered_path(parent, cls), cls, True)
        self.stack.append(info)

    def _pop(self, module, args, output):
        if self.stack:
            self.stack.pop()

    def layer_type_of(self, op) -> str:
        info = self.current
        return info.cls if info is not None and info.owns_ops else op_family(op)


def unregistered_path(caller: str, cls: str) -> str:
    """The path of a module its caller runs without holding it as a child (one built during
    forward, or kept in a global): ``<caller>.<Cls>``."""
    return f"{caller}.<{cls}>" if caller else f"<{cls}>"
