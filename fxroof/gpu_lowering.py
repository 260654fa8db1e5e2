"""Inductor's CUDA lowering without a GPU: what it asks of the device, answered from the chip.

Inductor lowers and schedules a graph for a CUDA device from a handful of the device's
properties -- its SM count (how many blocks a split reduction is cut into), its compute
capability and warp size -- and from whether Triton can drive it. None of that needs a GPU
when nothing is compiled or run, as in fxroof's compiled view (fxroof.compiled reads the
schedule and generates no code). So, for one lowering, this module answers those questions
from the target chip and hands Inductor the region's tensors as fake CUDA tensors -- or, for
a training step, whose backward cannot be traced on CUDA tensors without a GPU (autograd's
engine asks the device for its streams), each graph AOTAutograd partitioned on the CPU,
moved to CUDA just before Inductor lowers it (partitioned_on_cuda).

Checked with torch 2.14.1 (the hooks are internal API: ``DeviceProperties.create`` and the
CUDA device interface, ``torch.cuda.get_device_properties``, the scheduler's Triton check).
What still reads ``torch.cuda.is_available()`` sees no GPU and takes its no-GPU default: in
the default mode (no max-autotune) that decides nothing about fusion, only code Inductor
would generate.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Optional
from unittest import mock

import torch
import torch.fx as fx
from torch._dynamo import device_interface
from torch._inductor import config as inductor_config
from torch._inductor import scheduler as inductor_scheduler
from torch._inductor import utils as inductor_utils
from torch._inductor.runtime.hints import DeviceProperties
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils import _pytree as pytree
from torch.utils._triton import has_triton_package

from fxroof.errors import FxroofError
from fxroof.launch_geometry import RESIDENT

CUDA = torch.device("cuda", 0)
# the count Inductor would read off an A100 (108 SMs), where a target names no chip
DEFAULT_MULTIPROCESSORS = 108


@dataclasses.dataclass(frozen=True)
class DeviceFacts:
    """What Inductor asks of a CUDA device, in ``torch.cuda.get_device_properties``' names."""
    name: str
    major: int
    minor: int
    multi_processor_count: int
    total_memory: int = 0
    warp_size: int = 32
    regs_per_multiprocessor: int = 65536
    max_threads_per_multi_processor: int = 2048
    max_threads_per_block: int = 1024
    gcnArchName: str = ""  # noqa: N815 (torch's spelling)

    @classmethod
    def of(cls, capability: tuple[int, int], chip=None) -> "DeviceFacts":
        """The facts of a target: its compute capability, and the chip's SMs (CUs), memory
        and warp width where a chip is named."""
        units = getattr(chip, "multiprocessors", None) or DEFAULT_MULTIPROCESSORS
        # an AMD Instinct (CDNA) runs 64-thread wavefronts, where an NVIDIA warp has 32
        warp = 64 if getattr(chip, "vendor", None) == "AMD" else 32
        # resident threads an SM holds: how many pieces Inductor splits a reduction into
        threads = RESIDENT.get(tuple(capability), (2048, 0))[0]
        return cls(getattr(chip, "name", None) or "CUDA target", int(capability[0]),
                   int(capability[1]), int(units), int(getattr(chip, "capacity", 0) or 0),
                   warp, max_threads_per_multi_processor=threads)


def require_triton() -> None:
    if not has_triton_package():
        raise FxroofError("The compiled view of a CUDA target needs Triton, the code generator "
                          "Inductor schedules GPU kernels for, and this Python has none "
                          "(PyTorch's Linux CUDA wheels install it). Install it with "
                          "`pip install triton`, or analyse the compiled view with "
                          "device='cpu'.")


def _clear_caches() -> None:
    """Inductor caches what it read off the device; a lowering for another chip (or for none)
    must not see one chip's answers."""
    DeviceProperties.create.cache_clear()
    for name in ("is_big_gpu", "get_max_num_sms"):
        cached = getattr(inductor_utils, name, None)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()


@contextlib.contextmanager
def answering(facts: DeviceFacts):
    """Inductor's questions to the CUDA device answered with ``facts`` while inside."""
    def properties(device=None):
        return facts

    def capability(device=None):
        return facts.major, facts.minor

    patches = [
        # the joint graph's folding of uniform constants computes them on the device (a
        # one-element aten.full on CUDA): real compute, which no GPU is here for. It only
        # replaces a constant-valued tensor by a full() Inductor generates anyway
        inductor_config.patch(joint_graph_constant_folding=False),
        mock.patch.object(device_interface.CudaInterface, "get_device_properties",
                          staticmethod(properties)),
        mock.patch.object(device_interface.CudaInterface, "get_compute_capability",
                          staticmethod(lambda device=None: facts.major * 10 + facts.minor)),
        # bf16 is native from compute capability 8.0 (Ampere); below it Inductor skips the graph
        mock.patch.object(device_interface.CudaInterface, "is_bf16_supported",
                          staticmethod(lambda including_emulation=False: facts.major >= 8)),
        mock.patch("torch.cuda.get_device_properties", properties),
        mock.patch("torch.cuda.get_device_capability", capability),
        # the scheduler picks Triton's backend only where a device can run it
        mock.patch.object(inductor_scheduler, "has_triton", lambda: True),
    ]
    _clear_caches()
    try:
        with contextlib.ExitStack() as stack:
            for patch in patches:
                stack.enter_context(patch)
            yield facts
    finally:
        _clear_caches()


def _on_cuda(value):
    """A graph argument with every CPU device in it made the CUDA target's."""
    if isinstance(value, torch.device) and value.type == "cpu":
        return CUDA
    if isinstance(value, str) and value == "cpu":
        return "cuda"
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cuda(v) for v in value)
    if isinstance(value, dict):
        return {k: _on_cuda(v) for k, v in value.items()}
    return value


def to_cuda(gm: fx.GraphModule, example_inputs: list,
            fake_mode: Optional[FakeTensorMode] = None) -> tuple[fx.GraphModule, list]:
    """A Dynamo region found on the CPU, moved to the CUDA target: its example inputs and its
    tensor attributes (constants Dynamo kept) as fake CUDA tensors of the same shapes, dtypes
    and strides, and every device the graph names (a factory's ``device='cpu'``) CUDA's."""
    fake_mode = fake_mode or FakeTensorMode(allow_non_fake_inputs=True)

    def fake(t):
        if not isinstance(t, torch.Tensor):
            return t
        with fake_mode:
            moved = fake_mode.from_tensor(t).to(CUDA)
        return torch.nn.Parameter(moved, t.requires_grad) if isinstance(
            t, torch.nn.Parameter) else moved

    for name, value in list(gm.named_parameters(recurse=True)) + \
            list(gm.named_buffers(recurse=True)):
        owner, _, leaf = name.rpartition(".")
        setattr(gm.get_submodule(owner) if owner else gm, leaf, fake(value))
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            owner, _, leaf = node.target.rpartition(".")
            module = gm.get_submodule(owner) if owner else gm
            if isinstance(getattr(module, leaf, None), torch.Tensor):
                setattr(module, leaf, fake(getattr(module, leaf)))
        node.args, node.kwargs = _on_cuda(node.args), _on_cuda(node.kwargs)
    gm.recompile()
    return gm, [fake(t) for t in example_inputs]


@contextlib.contextmanager
def cuda_autocast(lower: torch.dtype):
    """CUDA's autocast, on for the fake CUDA tensors of a lowering. ``torch.autocast("cuda")``
    switches itself off where no CUDA driver is found; the state it would set is set here
    directly (the cast cache off: it holds real tensors between calls, and nothing runs)."""
    previous = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"),
                torch.is_autocast_cache_enabled())
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", lower)
    torch.set_autocast_cache_enabled(False)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled("cuda", previous[0])
        torch.set_autocast_dtype("cuda", previous[1])
        torch.set_autocast_cache_enabled(previous[2])


def partitioned_on_cuda(gm: fx.GraphModule, example_inputs: list) -> list:
    """A forward or backward graph AOTAutograd partitioned on the CPU, moved to the CUDA
    target just before Inductor lowers it: every device it names made CUDA's, its example
    inputs (fake tensors of AOT's mode) and every node's fake value made CUDA tensors of the
    same shapes, dtypes and strides. Returns the inputs. The values are moved, not
    recomputed: a saved activation Inductor's forward laid out channels-last reaches the
    backward so, and the backward's views of it are Inductor's to lower (a fake view of
    the moved tensor would refuse what the CPU's strides allowed)."""
    mode = detect_fake_mode(example_inputs)

    def moved(value):
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            with mode:
                return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                           device=CUDA)
        return value

    inputs = [moved(t) for t in example_inputs]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, inputs):
        node.meta["val"] = value
    for node in gm.graph.nodes:
        node.args, node.kwargs = _on_cuda(node.args), _on_cuda(node.kwargs)
        if node.op != "placeholder" and "val" in node.meta:
            node.meta["val"] = pytree.tree_map(moved, node.meta["val"])
    gm.recompile()
    return inputs
