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
