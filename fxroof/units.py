"""Units and names: SI formatting of FLOP, bytes and seconds, what a peak counts, and the one
spelling of each dtype. A leaf without torch: dtypes are handled by name ("float32")."""
from __future__ import annotations

from typing import Optional

_SI = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]

# every spelling a user may type -> the torch name
DTYPE_ALIASES = {"float32": "float32", "float": "float32", "fp32": "float32",
                 "float16": "float16", "half": "float16", "fp16": "float16",
                 "bfloat16": "bfloat16", "bf16": "bfloat16",
                 "float64": "float64", "double": "float64", "fp64": "float64"}
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
# torch name -> the key of chips.yaml's peaks
PEAK_KEYS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64",
             "int8": "int8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}

# torch name -> bytes an element
ITEMSIZES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
             "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1,
             "float8_e5m2": 1, "complex64": 8, "complex128": 16}


def si(value: Optional[float], unit: str, digits: int = 3) -> str:
    """1.234e9, 'FLOP' -> '1.23 GFLOP'. Decimal prefixes throughout (1 MB = 10^6 bytes)."""
    if value is None:
        return "-"
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def seconds(value: Optional[float]) -> str:
    """0.0123 -> '12.3 ms'."""
    if value is None:
        return "-"
    for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value * 1e9:.3g} ns"


def op_unit(peak_key: str) -> str:
    """What a peak of this key counts: integer peaks are operations (OP), not FLOP."""
    return "OP" if peak_key.startswith("int") else "FLOP"


def dtype_name(dtype) -> str:
    """torch.float32 (or 'torch.float32') -> 'float32'."""
    return str(dtype).removeprefix("torch.")


def peak_key(dtype: Optional[str]) -> str:
    """The chips.yaml peak a tensor of this dtype runs at ('bfloat16' -> 'bf16'); fp32 when
    the dtype has no peak of its own."""
    return PEAK_KEYS.get(dtype_name(dtype) if dtype else "float32", "fp32")


def itemsize(dtype: Optional[str]) -> int:
    """Bytes an element of this dtype takes ('bfloat16' -> 2); 4 where it is unknown."""
    return ITEMSIZES.get(dtype_name(dtype) if dtype else "float32", 4)
