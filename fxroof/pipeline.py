"""An eager step on an accelerator: the host issues ops while the device runs earlier ones.

In eager PyTorch on a GPU, kernel launches are asynchronous: the host (Python, the
dispatcher, the launch itself) issues op i+1 while the device still runs op i. An op timed
alone pays its host cost around its own kernel -- that is what the calibrated fixed cost
``t0`` holds (NeuSight timed each kernel from an idle GPU, so its floor of 23-59 us is the
host's; ``../shared/data/gpu-kernels/README.md``; the share after the launch runs beside the
kernel, calibration.with_fixed_cost) -- but inside a model that cost overlaps the kernels
before it. So a step takes neither the sum of its ops' isolated times nor the sum
of its kernels. With h_i the host cost of op i and k_i its kernel time, the device starts op
i once the host has issued it and the device has finished op i-1:

    issued_i = issued_{i-1} + h_i
    done_i   = max(done_{i-1}, issued_i) + k_i         step = done_N

Small batches are host-bound (step ~ sum h: the device waits between kernels), large ones
device-bound (step ~ h_1 + sum k). Between the two, where h and k are alike, the isolated
sum over-counts up to 2x.

A kernel runs for at least ``KERNEL_FLOOR_S`` on the device however little it does: empty
kernels launched back to back without synchronisation run at about 334,000 per second
(M. Boyer, "CUDA Kernel Overhead", www.cs.virginia.edu/~mwb7w/cuda_support/
kernel_overhead.html), 3 us each.
"""
from __future__ import annotations

from typing import Iterable

KERNEL_FLOOR_S = 3.0e-6  # s: one kernel on the device, back to back (source above)
# An op's host cost in a training step over its cost timed alone (the fixed cost t0, fitted
# on ops timed without autograd): the step's forward records each op's backward node and
# saves its inputs, its backward runs through the autograd engine and its update through the
# optimizer's Python. Fitted on an H200's measured eager training steps (17 torchvision
# models, fp32 and bf16 autocast, batches 16 and 64: benchmarks/measured/h200-run*.json) by
# benchmarks/fit_training_host.py: 1.35, 1.3-1.35 leaving each model out (session 89, with
# autocast's casts at AUTOCAST_HOST_SHARE; 1.25 while they cost a whole op, the factor
# standing in for their share of a bf16 step; 1.35 before that too, before a bf16 training
# batch norm's reductions were priced on a GPU, fxroof.launch_geometry). Where the host is
# faster or slower than that VM's 16-core host it is off by as much as the t0 themselves.
AUTOGRAD_HOST_FACTOR = 1.35
# The host cost of the autograd engine's own gradient sums (a record's ``accumulates``: where
# two paths' gradients reach one tensor, InputBuffer::add adds them after the function that
# produced the second returns) over a training step's other ops. The engine calls ATen from
# C++: no Python, no autograd node of its own, nothing saved. Not timed alone here; an op of
# the same kind, an autocast cast dispatched from C++ inside another op, cost an H200 VM's
# host 6.5-8.2 us, 0.23-0.41 of a Python-issued op of the same inference step
# (benchmarks/host_ops.py summary benchmarks/measured/h200-host-ops-b1.json), so 0.18-0.33 of
# a training step's op at AUTOGRAD_HOST_FACTOR. DenseNet-121's backward holds 535 such adds
# beside 977 other ops, ResNet-50's 16 beside 170 (benchmarks/README.md, "The autograd
# engine's gradient sums").
ACCUMULATION_HOST_SHARE = 0.25
# The host cost of a cast CUDA's autocast makes inside another op's kernel (a record's
# ``autocast_internal``: cached_cast in the op's AutocastCUDA kernel, from C++; a weight's
# once per autocast region, an activation's every call) over its class's t0. Read directly,
# not fitted to step times: torch.profiler's CPU events of one bf16 inference step at batch 1
# on the workplace's H200 VM (torch 2.11; benchmarks/host_ops.py summary
# benchmarks/measured/h200-host-ops-b1.json) put a cast at 0.23, 0.31, 0.37 and 0.41 of the
# same step's Python-issued ops (ResNet-50, MobileNetV2, ConvNeXt-T, ViT-B/16: 6.5-8.2 us),
# median 0.34; the ops around them cost what they cost in fp32 (elementwise ones 0.93-1.07x).
# Priced at a whole op, the casts had made the two VMs' host-bound bf16 steps 1.23-1.44x their
# measurements; at 0.34, the H100's (held out) bf16 inference went from a median error of
# 15.2% to 8.6% (benchmarks/README.md, "An autocast cast's host cost, read"). The 2021 hosts
# of DeepLearningExamples (PyTorch 1.8-era NGC) spent about a whole op on one: a host of
# another PyTorch falls in HOST_BAND, as for every host cost.
AUTOCAST_HOST_SHARE = 0.34
# The host cost of a kernel Inductor generates (the compiled view of a GPU: a Triton launch
# from Inductor's Python wrapper, no nn.Module, no dispatcher) over its class's t0, which is
# a Python-issued eager op's. Not measured here: tritonbench's breakdown of Inductor's
# launch (meta-pytorch/tritonbench pull request 1017, 2026-04-14, a GB200 host) puts one
# kernel's CachingAutotuner.run at 6.8-9.1 us (0 to 19 arguments), the raw cuLaunchKernel
# at 3.0-3.3 us of it; a Python-issued eager op on the workplace's H200 VM costs 19-24 us
# (the C++-issued casts above, 6.5-8.2 us, are 0.34 of it). 8 / 22: 0.35. A library kernel
# Inductor calls (extern: a cuDNN convolution, a cuBLAS product) keeps an op's whole t0:
# it goes through ATen's dispatcher as an eager op does. Per compiled region, Dynamo's
# guards and the wrapper add 33-44 us a call (the same source), not priced.
GENERATED_KERNEL_HOST_SHARE = 0.35
# The p10 and p90 of a host's per-op cost over the shipped t0 (fitted on NeuSight's
# hosts), where the host is not the one measured: the host issuing a GPU's ops is no part
# of the chip (its CPU, Python and PyTorch), and hosts differ by 2-3x. Measured / predicted
# of the steps the model says are host-bound (the device waiting at least half the step):
# 185 on the workplace's H100 and H200 VMs (torch 2.11) at a median 0.89, 14 of
# DeepLearningExamples' 2021 latencies (V100, T4, A100; pytorch-21.03) at 1.44; each host
# software weighing one (benchmarks/fit_host_band.py: 0.775, 1.817; refitted in session 89
# with autocast's casts at AUTOCAST_HOST_SHARE, 0.69-1.55 before). A host-bound step's band
# is this, not its kernels'. Each host lies outside the band the other alone gives: it
# spans the hosts seen, and a host slower or faster than both falls outside it.
HOST_BAND = (0.78, 1.82)
# The host's build of a cuDNN attention plan (fxroof.plan_builds), which an eager decode loop
# pays once per distinct attention call each step: validating the operation graph, the
# heuristics' engine configs and building the plans before the kernel launches. On the
# workplace's H200 VM (torch 2.11+cu130, transformers 5.17, a Llama-3.2-1B-shaped model at a
# 4,000-token cache, benchmarks/decode_host_probe.py) a 2-layer model's decode step took 38.7
# ms against 2.2 ms for the same one-token forward without a cache, its two attention calls
# 36 ms of it (cProfile: one builds, one hits); a 16-layer one took 51.9 ms with builds and
# 14.3 ms where the plans were already cached -- 36.2 and 37.6 ms a step. A host's cost, so it
# takes HOST_BAND. (PyTorch PR 191576 reports 42.2 ms for a varlen call that rebuilt its
# graph every time, on another machine.)
CUDNN_PLAN_BUILD_S = 37e-3


def pipelined_s(ops: Iterable[tuple[float, float]]) -> float:
    """Seconds until the device finishes the last op, for (host s, kernel s) per op in issue
    order. Ops with no host cost (a roof time, a view) just queue behind the device."""
    issued = done = 0.0
    for host_s, kernel_s in ops:
        issued += host_s
        done = max(done, issued) + kernel_s
    return done
