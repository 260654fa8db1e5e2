"""The names of what each pass writes, in one place: phases and ``node.meta`` keys.

capture writes ORIGIN, SHAPES (every call node), ACCUMULATES (backward call nodes),
AUTOCAST_INTERNAL (the ops CUDA's autocast issues inside another's kernel) and INPUT
(placeholders), and in a GPU's decode step PLAN_BUILD (fxroof.plan_builds); the cost pass
writes COST; the page-fault pass FAULTS; the memory pass SAVED_TRAFFIC; the timing pass
TIME; the roofline pass ROOF. Later passes read what earlier ones wrote, the way torch.fx's
ShapeProp writes ``meta["tensor_meta"]`` for the passes after it.
"""
FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
PHASES = (FORWARD, BACKWARD, OPTIMIZER)  # a training step's order

ORIGIN = "fxroof.origin"  # capture: Origin(phase, module, layer_type, forward_node)
ACCUMULATES = "fxroof.accumulates"  # capture, backward: the engine summing two paths' gradients
AUTOCAST_INTERNAL = "fxroof.autocast_internal"  # capture: a cast CUDA's autocast makes from C++
PLAN_BUILD = "fxroof.plan_build"  # decode step: a cuDNN attention call that builds its plan
SHAPES = "fxroof.shapes"  # capture: TensorMeta of the outputs at the time of the call
INPUT = "fxroof.input"    # capture, placeholders: InputKind(kind, label)
COST = "fxroof.cost"      # cost pass: op_costs.Estimate (FLOP, bytes, rule, op class)
TIME = "fxroof.time"      # timing pass: timers.Summary (seconds)
ROOF = "fxroof.roof"      # roofline pass: roofline.NodeRoof on the chip placed on
# page-fault pass: bytes the node's allocations fault in (int; None on CUDA)
FAULTS = "fxroof.faults"
SAVED_TRAFFIC = "fxroof.saved_traffic"  # memory pass: (bytes read, written) of saved activations
KERNEL = "fxroof.kernel"  # compiled view: names of the ATen nodes a kernel holds
UNPRICED = "fxroof.unpriced"  # compiled view: targets of a kernel's ATen nodes with no rule
FRAME_LOCAL = "fxroof.frame_local"  # compiled view: the Dynamo frame local a node's module is
#                                     named from (fxroof.region_modules)
