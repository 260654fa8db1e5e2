import copy
import math

import pytest
import torch

from op_costs import TensorMeta


def T(*shape, dtype=torch.float32, stride=None):
    """Metadata of a tensor of this shape (contiguous unless a stride is given)."""
    if stride is None:
        return TensorMeta.contiguous(shape, dtype)
    return TensorMeta(tuple(shape), tuple(stride), dtype)


def numel(*shape):
    return math.prod(shape)


@pytest.fixture
def t():
    return T


@pytest.fixture(scope="session", autouse=True)
def one_quick_cpu_measurement_per_suite():
    """Every study the suite runs measures this machine's roofs in its own folder
    (fxroof.study.sweep.measure_roofs), a quick calibrated chip of 20-40 s here: the first
    is measured for real, the others get a copy of it -- what they test is the study around
    the chip. The measurement's own tests call fxroof.probes, which this leaves alone."""
    from fxroof.study import sweep

    measured = {}
    measure = sweep.measure_calibrated

    def measured_once(device, quick=True, progress=None):
        if (device, quick) not in measured:
            measured[device, quick] = measure(device, quick=quick, progress=progress)
        return copy.deepcopy(measured[device, quick])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep, "measure_calibrated", measured_once)
        yield
