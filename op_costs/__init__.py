"""Per-ATen-op cost rules: one registry, one module per op family.

Importing this package registers every rule but those of Inductor's own prims
(:mod:`op_costs.inductor_prims`, imported by the compiled view, which imports Inductor).
See :mod:`op_costs.registry` for the calling convention and the memory-traffic model, and
each family module for its formulas.
"""
from op_costs.registry import (  # noqa: F401
    DEFAULT_RULE,
    MATRIX,
    MEMORY,
    NAMED_RULES,
    RULES,
    VECTOR,
    VIEW,
    Cost,
    Estimate,
    TensorMeta,
    estimate,
    override_rule,
    register,
    register_named,
    rule_for,
)
from op_costs import (  # noqa: F401,E402  (imported for their registrations)
    attention,
    onednn,
    conv,
    data_movement,
    matmul,
    norm,
    pointwise,
    pooling,
    reduction,
    linalg,
    loss,
    optimizer,
    resample,
    rnn,
)
