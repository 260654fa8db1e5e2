"""Which buffers a compiled step allocates: Inductor's memory plan, replayed for page faults.

An eager step allocates every ATen op's output; a compiled one allocates far fewer buffers.
Inductor's wrapper (codegen/wrapper.py, checked with torch 2.14.1) plans them:

* a buffer fused away inside a kernel is never allocated
  (``Scheduler.can_buffer_be_removed_through_fusion``);
* a generated kernel writes its output in place of an input it is the last user of, read at
  the same index, of the same storage size (``decide_inplace_update``: ``buf3 = buf2; del
  buf2  # reuse``); a kernel that keeps a chain of such buffers (a batch norm, then a SiLU
  of it: ``buf18 = buf17  # reuse; buf19 = buf18  # reuse``) writes them all over the
  chain's input;
* a buffer the plan allocates takes a freed buffer of exactly its storage size, the last one
  freed first (``memory_plan_reuse``: ``AllocateLine`` / ``FreeIfNotReusedLine``), and a freed
  buffer no later allocation takes is deleted where it was freed;
* a concatenation's inputs are written straight into their slices of its result
  (``NonOwningLayout``), which the wrapper allocates when the first slice is written
  (``codegen_allocation``): a DenseNet block's concatenations, one per layer, are all
  allocated before its first layer runs; and no kernel is written over a concatenation's
  result (``decide_inplace_update`` skips a ``NopKernelSchedulerNode``'s buffers), so the
  batch norm that reads one writes a buffer of its own;
* an extern kernel that allocates its own result (a oneDNN convolution called without
  ``out=``) gets fresh memory from the allocator every call, though a later kernel may reuse
  the buffer once it is free; one that returns a tuple (with freezing, every prepacked
  oneDNN convolution) allocates its result too, which a ``MultiOutput`` kernel that
  computes nothing then names (``_with_owners``: those faults are the call's);
* the graph's outputs live to the end of the step.

The heap events this plan makes go through the same model of glibc's arena as an eager
step (fxroof.heap), with the scratch buffers a library kernel allocates inside its call
(hidden_bytes.scratch_buffers: a channels-last convolution's blocked weights). Not modelled:
the plan's peak-memory check (``should_reuse_buffer`` declines a reuse that would raise the
step's peak; inference plans rarely meet it), and a training step's saved activations, which
are taken as freed when the step ends, not when its backward reads them.

Checked against the kernel's minor-fault count per call of compiled torchvision models
(benchmarks/README.md, "Compiled page faults").
"""
from __future__ import annotations

from collections import defaultdict
from typing import Optional

from torch._inductor import ir
from torch._inductor.scheduler import NopKernelSchedulerNode
from torch._inductor.virtualized import V

from fxroof import heap

PLAN, LIBRARY = "plan", "library"   # who allocates a buffer: Inductor's plan, or the kernel


def kernel_buffers(node) -> dict:
    """What a scheduled kernel allocates and frees, as plain data: ``allocations`` (name,
    storage bytes, who allocates it, the input it is written in place of if any, whether the
    graph returns it) and ``frees`` (the buffers whose last use it is)."""
    scheduler, graph = node.scheduler, V.graph
    returned = set(graph.get_output_names())
    fused = {n.get_name() for n in node.get_nodes()}
    allocations = []
    through: dict = {}  # a buffer fused away -> the buffer it would have been written over
    for sub in node.get_nodes():
        for buf in sub.get_outputs():
            name, ir_node = buf.get_name(), buf.node
            if name in graph.removed_buffers or ir_node is None or \
                    isinstance(ir_node.get_output_spec(), (ir.NoneLayout, ir.MultiOutputLayout)):
                continue
            if name not in returned and scheduler.can_buffer_be_removed_through_fusion(name,
                                                                                     fused):
                # not allocated, but a chain written in place may run through it
                source = _inplace_input(sub, buf, graph)
                if source is not None:
                    through[name] = through.get(source, source)
                continue
            owner = _owning_buffer(ir_node)
            if owner is not None:  # a slice of a concatenation: the first writer allocates it
                allocations.append({"name": owner.get_name(),
                                    "bytes": _storage_bytes(graph, owner), "by": PLAN,
                                    "inplace_of": None,
                                    "returned": owner.get_name() in returned})
                continue
            if ir_node.get_inputs_that_alias_output() or ir_node.get_mutation_names():
                continue  # a view or a mutation of a buffer already allocated
            planned = ir_node.should_allocate()
            if not planned and not sub.is_extern():
                continue
            inplace = _inplace_input(sub, buf, graph) if planned and not sub.is_extern() \
                else None
            allocations.append({"name": name, "bytes": _storage_bytes(graph, ir_node),
                                "by": PLAN if planned else LIBRARY,
                                "inplace_of": through.get(inplace, inplace),
                                "returned": name in returned})
    return {"allocations": allocations, "frees": sorted(node.last_usage),
            "outputs": [buf.get_name() for sub in node.get_nodes() for buf in sub.get_outputs()],
            "unpacks": _unpacked(node.node)}


def _unpacked(ir_node) -> Optional[str]:
    """The buffer whose result a ``MultiOutput`` takes apart (a library call returning a
    tuple: with freezing, every prepacked oneDNN convolution), else None. The call allocates
    the result; the MultiOutput kernel that names it computes and moves nothing."""
    if isinstance(ir_node, ir.MultiOutput) and ir_node.inputs:
        return ir_node.inputs[0].get_name()
    return None


def _owning_buffer(ir_node) -> Optional[ir.Buffer]:
    """The buffer whose storage ``ir_node`` is written into (a ``NonOwningLayout``: one input
    of a concatenation written straight into its slice of the result), else None. Inductor's
    wrapper allocates that buffer when the first such slice is written
    (``codegen_allocation``), not where the concatenation is scheduled: a DenseNet block's
    concatenations are all allocated before its first layer runs."""
    layout = ir_node.get_output_spec()
    if not isinstance(layout, ir.NonOwningLayout):
        return None
    target = layout.view.data
    while not isinstance(target, ir.Buffer):  # storage boxes and views around the buffer
        target = target.unwrap_view() if isinstance(target, ir.BaseView) else target.data
    return target


def _storage_bytes(graph, ir_node) -> int:
    try:
        elements = graph.sizevars.optimization_hint(graph.get_allocation_storage_size(ir_node),
                                                    fallback=0)
        return int(elements) * ir_node.get_dtype().itemsize
    except Exception:  # symbolic or opaque layouts: nothing known to allocate
        return 0


def _inplace_input(sub, buf, graph) -> Optional[str]:
    """The input a generated kernel's output would be written in place of, by the rule of
    Inductor's ``decide_inplace_update``: an intermediate buffer whose one remaining user is
    this kernel, reading it at the index it writes (``NodeUser.can_inplace``), of the same
    storage size."""
    scheduler = sub.scheduler
    size = _storage_bytes(graph, buf.node)
    done = set(sub.ancestors)
    for read in sub.read_writes.reads:
        source = scheduler.name_to_buf.get(read.name)
        if source is None or read.name in graph.graph_inputs or read.name in graph.constants \
                or source.node is None \
                or isinstance(source.defining_op, NopKernelSchedulerNode):
            continue  # (a concatenation's result is never written over: decide_inplace_update)
        remaining = [u for u in source.users if u.node.get_name() not in done]
        if len(remaining) == 1 and remaining[0].can_inplace and remaining[0].node is sub \
                and _storage_bytes(graph, source.node) == size:
            return read.name
    return None


def plan_events(lowerings: list[list[tuple]], pin_before: Optional[int] = None) -> list:
    """Heap events of a compiled step (fxroof.heap): ``lowerings`` in the order they run,
    each a list of (owner, kernel_buffers' dict, scratch sizes) per kernel; ``pin_before``:
    the index of the lowering (a training step's first backward) that starts with the
    library state pinned at the heap's top (fxroof.page_faults). Allocation keys are
    (owner, buffer name) and (owner, scratch index)."""
    events: list = []
    at_end: list = []
    for index, kernels in enumerate(lowerings):
        if index == pin_before:
            events.append(("pin", "first backward", 64))
        events.extend(_lowering_events(_with_owners(kernels), at_end))
    events.extend(("free", key) for key in at_end)
    return events


def _with_owners(kernels: list[tuple]) -> list[tuple]:
    """``kernels`` with an owner for the allocations of a kernel that has none (the view
    keeps no node for a MultiOutput): the call whose result it unpacks, which is where the
    library allocates it and its pages are first touched."""
    owner_of: dict = {}   # output buffer name -> owner
    resolved = []
    for owner, buffers, scratch in kernels:
        if owner is None:
            owner = owner_of.get(buffers["unpacks"])
        owner_of.update(dict.fromkeys(buffers["outputs"], owner))
        resolved.append((owner, buffers, scratch))
    return resolved


def _lowering_events(kernels: list[tuple], at_end: list) -> list:
    """One lowered graph's events: a buffer chain (a fresh allocation and every buffer that
    reuses it) is allocated where its first buffer is and freed where its last one is freed
    and not reused -- or at the step's end (``at_end``) if the graph returns it."""
    chain_of: dict = {}                 # buffer name -> chain key (its first allocation)
    pool: dict = defaultdict(list)      # storage bytes -> chains freed, last freed last
    released: dict = {}                 # chain -> index of the kernel after which it is freed
    born: dict = defaultdict(list)      # kernel index -> [(chain, bytes)]
    size_of: dict = {}
    holder: dict = {}                   # chain -> the buffer that holds it now
    for i, (owner, buffers, _) in enumerate(kernels):
        for a in buffers["allocations"]:
            if a["name"] in chain_of:
                continue  # a concatenation, allocated by the first writer of one of its slices
            chain = None
            if a["by"] == PLAN:
                inplace = a["inplace_of"]
                if inplace in chain_of and chain_of[inplace] not in released:
                    chain = chain_of[inplace]
                elif pool[a["bytes"]]:
                    chain = pool[a["bytes"]].pop()
                    del released[chain]
            if chain is None:
                chain = (owner, a["name"])
                born[i].append((chain, a["bytes"]))
                size_of[chain] = a["bytes"]
            chain_of[a["name"]] = chain
            holder[chain] = a["name"]
            if a["returned"]:
                released[chain] = None  # lives to the step's end, never reused
        for name in buffers["frees"]:
            chain = chain_of.get(name)
            if chain is not None and holder[chain] == name and chain not in released:
                released[chain] = i
                pool[size_of[chain]].append(chain)
    freed_after = defaultdict(list)
    for chain, i in released.items():
        (at_end if i is None else freed_after[i]).append(chain)
    at_end.extend(chain for chains in born.values() for chain, _ in chains
                  if chain not in released)  # never freed within the graph: a leak-free end
    events = []
    for i, (owner, _, scratch) in enumerate(kernels):
        keys = [(owner, s) for s in range(len(scratch))]
        events.extend(("alloc", key, size) for key, size in zip(keys, scratch))
        events.extend(("alloc", chain, size) for chain, size in born[i])
        events.extend(("free", key) for key in keys)
        events.extend(("free", chain) for chain in freed_after[i])
    return events


def owned_faults(events: list) -> dict:
    """Bytes each owner's allocations fault in, in the steady state of a process that runs
    the step again and again (heap.steady_faults)."""
    faulted: dict = defaultdict(int)
    for key, nbytes in heap.steady_faults(events).items():
        faulted[key[0]] += nbytes
    return faulted
