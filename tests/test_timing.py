"""The timing pass: timer logic (CUDA event pairing tested with fake events), the CPU
timing pass end to end, exports and errors. CUDA runs only where a GPU is present."""
import json

import pytest
import torch
from torch import nn

import fxroof
from fxroof.timers import CpuTimer, CudaTimer, summarize


class FakeEvent:
    """Stands in for torch.cuda.Event: a recorded device timestamp in ms."""

    clock_ms = 0.0

    def record(self):
        FakeEvent.clock_ms += 1.5
        self.t = FakeEvent.clock_ms

    def elapsed_time(self, end):
        assert getattr(self, "synced", False), "elapsed_time read before synchronize"
        return end.t - self.t


def test_cuda_timer_pairs_events_and_synchronises_once():
    syncs = []
    events = []

    def make():
        e = FakeEvent()
        events.append(e)
        return e

    def synchronize():
        syncs.append(1)
        for e in events:
            e.synced = True

    timer = CudaTimer(event_factory=make, synchronize=synchronize)
    for key in ("a", "b", "c"):
        timer.start(key)
        timer.stop(key)
    assert syncs == []  # no synchronisation between nodes
    times = timer.collect()
    assert syncs == [1]
    assert times == {"a": 1.5e-3, "b": 1.5e-3, "c": 1.5e-3}  # ms -> s
    assert timer.collect() == {} and syncs == [1, 1]


def test_cuda_timer_rejects_an_unstopped_pair():
    timer = CudaTimer(event_factory=FakeEvent, synchronize=lambda: None)
    timer.start("x")
    with pytest.raises(RuntimeError, match="never stopped"):
        timer.collect()


def test_cpu_timer_with_a_fake_clock():
    ticks = iter([1.0, 1.25, 2.0, 2.5])
    timer = CpuTimer(clock=lambda: next(ticks))
    timer.start("a"); timer.stop("a"); timer.start("b"); timer.stop("b")
    assert timer.collect() == {"a": 0.25, "b": 0.5}


def test_summary_median_and_spread():
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s.median_s, s.min_s, s.max_s, s.iqr_s, s.samples) == (3.0, 1.0, 5.0, 2.0, 5)


@pytest.fixture(scope="module")
def timed():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 14 * 14, 10))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    g = fxroof.analyze(model, torch.randn(4, 3, 16, 16), backward=True)
    report = g.time(device="cpu", repeats=3, warmup=1)
    return g, report, model, before


def test_every_node_is_timed_and_phases_sum(timed):
    g, report, _, _ = timed
    records = g.records()
    assert all(r["time_s"] is not None and r["time_s"] >= 0 for r in records)
    for phase in ("forward", "backward"):
        total = sum(r["time_s"] for r in records if r["phase"] == phase)
        assert total == pytest.approx(report.interpreted_s[phase])
        assert report.eager_s[phase] > 0
    assert 0 < report.overhead_s < 1e-3
    rows = g.breakdown("layer_type", sort="time_s")
    assert sum(r["time_s"] for r in rows) == pytest.approx(sum(report.interpreted_s.values()))


def test_timing_leaves_the_model_untouched(timed):
    _, _, model, before = timed
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_the_eager_step_gives_the_models_own_parameters_back_even_interrupted(monkeypatch):
    """The eager step runs the user's module on the step's tensors, swapped in once for all
    its runs (functional_call swapped them on every call: 14% of mobilenet_v2's step at
    batch 1); swapped back after, a Ctrl-C in the middle included."""
    from fxroof import timing

    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).train()
    own = {n: p for n, p in model.named_parameters()}
    g = fxroof.analyze(model, torch.randn(3, 4), backward=True)
    g.time(repeats=2, warmup=1, progress=False)

    def interrupted(step, warmup, repeats, progress=None):
        step()
        raise KeyboardInterrupt

    monkeypatch.setattr(timing, "repeat", interrupted)
    with pytest.raises(KeyboardInterrupt):
        g.time(repeats=2, warmup=1, progress=False, eager_first=True)
    assert all(p is own[n] for n, p in model.named_parameters())
    assert all(isinstance(p, nn.Parameter) and p.requires_grad and p.grad is None
               for p in own.values())
    assert model.training and model[1].num_batches_tracked == 0


def test_json_timing_section_and_trace(timed, tmp_path):
    g, report, _, _ = timed
    g.to_json(str(tmp_path / "t.json"))
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["timing"]["device"] == "cpu" and data["timing"]["repeats"] == 3
    assert set(data["timing"]["eager_s"]) == {"forward", "backward"}
    assert all(n["time_s"] is not None for n in data["nodes"])
    g.to_trace(str(tmp_path / "t.trace.json"))
    trace = json.loads((tmp_path / "t.trace.json").read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(g.records())
    assert {e["tid"] for e in slices} == {1, 2}  # one track per phase
    assert all("flops" in e["args"] for e in slices)


def test_the_graphs_replay_the_model_exactly():
    model = nn.Sequential(nn.Linear(6, 5), nn.GELU(), nn.Linear(5, 3)).eval()
    g = fxroof.analyze(model, torch.randn(2, 6))
    from fxroof.timing import forward_inputs, model_state
    import torch.fx as fx

    state = model_state(g.forward, model, torch.device("cpu"))
    inputs = forward_inputs(g.forward, state, torch.device("cpu"))
    out = fx.GraphModule(nn.Module(), g.forward)(*inputs)[0]
    assert torch.allclose(out, model(inputs[-1]), atol=1e-6)


def test_cuda_without_a_gpu_is_a_clear_error(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from fxroof.cli import main

    assert main(["profile", "resnet18", "--device", "cuda"]) == 1
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and "--device cpu" in err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("amp", [None, "bf16"])
def test_cuda_timing_end_to_end(amp):
    g = fxroof.analyze("resnet18", batch=8, backward=True, loss="cross_entropy", amp=amp,
                       device="cuda")
    report = g.time(device="cuda", repeats=5, warmup=2)
    assert all(r["time_s"] is not None for r in g.records())
    assert report.eager_s["forward"] > 0


def test_nodes_that_name_a_device_run_on_the_timed_one():
    """Autograd records the backward of an autocast cast as a copy back to the forward
    input's device: the capture's, the CPU, even for a CUDA target (an H100 refused
    resnet50's --amp bf16 training step: its loss gradient had been copied to the host).
    The timing pass runs such a node on the device it times."""
    from fxroof.timing import TimedProgram
    g = fxroof.analyze(nn.Sequential(nn.Linear(4, 3)), torch.randn(2, 4), backward=True,
                       loss="cross_entropy", amp="bf16", device="cuda")
    named = [n.kwargs["device"] for n in g.backward.nodes if "device" in n.kwargs]
    assert named and {d.type for d in named} == {"cpu"}
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.ops.aten._to_copy.default, (x,),
                                     {"dtype": torch.float32, "device": torch.device("cpu")}))
    meta = torch.device("meta")  # a device other than the CPU, on any machine
    out = TimedProgram(graph, timed=lambda n: False, device=meta).run(
        CpuTimer(), torch.empty(3, dtype=torch.bfloat16, device=meta))
    assert out.device == meta and out.dtype == torch.float32


def test_profile_cli(capsys, tmp_path):
    from fxroof.cli import main

    trace = str(tmp_path / "r.trace.json")
    code = main(["profile", "tests.fixtures.user_models:small_net", "--input-shape", "2,3,16,16",
                 "--backward", "--repeats", "2", "--warmup", "1", "--trace", trace,
                 "--chip", "a100_sxm_80gb"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "sum of nodes" in out and "eager" in out and "time" in out
    assert "Where to look on NVIDIA A100 SXM4 80GB" in out and "% of roof" in out
    assert json.load(open(trace))["traceEvents"]


def test_out_of_memory_reports_batch_and_the_cost_pass_peak(monkeypatch):
    from fxroof import timing

    g = fxroof.analyze(nn.Linear(4, 2), torch.randn(3, 4), backward=True)

    def exhausted(self, *args):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")

    monkeypatch.setattr(timing.TimedProgram, "run", exhausted)
    with pytest.raises(fxroof.FxroofError, match="Out of memory on cpu .* at batch 3") as e:
        g.time(repeats=1, warmup=0)
    assert "peak of" in str(e.value) and "smaller --batch" in str(e.value)


def test_the_cpu_allocators_failure_is_out_of_memory_too(monkeypatch):
    """glibc's malloc refusing a block surfaces as a RuntimeError of its own wording."""
    from fxroof import timing

    g = fxroof.analyze(nn.Linear(4, 2), torch.randn(3, 4))

    def refused(*args):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                           "can't allocate memory: you tried to allocate 60211200000 bytes.")

    monkeypatch.setattr(timing, "random_like", refused)
    with pytest.raises(fxroof.FxroofError, match="Out of memory on cpu .* at batch 3"):
        g.time(repeats=1, warmup=0)


def test_a_step_estimated_past_the_free_memory_is_refused_before_it_runs(monkeypatch):
    """Past the memory there is, the OOM killer ends the process with nothing to catch."""
    from fxroof import timing

    g = fxroof.analyze(nn.Linear(4, 2), torch.randn(3, 4))
    ran = []
    monkeypatch.setattr(timing.TimedProgram, "run", lambda self, *a: ran.append(1))
    monkeypatch.setattr(timing, "available_bytes", lambda dev: g.memory.peak_bytes - 1)
    with pytest.raises(fxroof.FxroofError, match=r"peak of .*, and .* is free\. Use a smaller"):
        g.time(repeats=1, warmup=0)
    assert ran == []
    monkeypatch.undo()
    monkeypatch.setattr(timing, "available_bytes", lambda dev: g.memory.peak_bytes)
    assert g.time(repeats=1, warmup=0).eager_s["forward"] > 0  # as much free as the peak


@pytest.mark.parametrize("meminfo, limit, current, expected", [
    ("MemTotal: 100 kB\nMemAvailable:  64 kB\n", None, None, 64 * 1024),
    ("MemAvailable: 64 kB\n", "max", "10", 64 * 1024),  # a cgroup without a limit
    ("MemAvailable: 64 kB\n", "50000", "20000", 30000),  # a container's limit is less
    ("MemFree: 5 kB\n", "50000", "20000", 30000),
    ("MemFree: 5 kB\n", None, None, None),  # nothing says what is available
])
def test_available_memory_from_meminfo_and_the_cgroup(tmp_path, meminfo, limit, current,
                                                      expected):
    from fxroof.device import available_bytes

    (tmp_path / "meminfo").write_text(meminfo)
    for name, value in (("memory.max", limit), ("memory.current", current)):
        if value is not None:
            (tmp_path / name).write_text(value + "\n")
    assert available_bytes(torch.device("cpu"), str(tmp_path / "meminfo"),
                           str(tmp_path)) == expected
    assert available_bytes(torch.device("cuda"), str(tmp_path / "meminfo"),
                           str(tmp_path)) is None


def test_a_node_that_fails_on_the_device_is_named(monkeypatch):
    g = fxroof.analyze(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4))
    relu = next(n for n in g.forward.nodes if n.name.startswith("relu"))
    relu.target = torch.ops.aten.linalg_cholesky_ex.default  # fails at run time on 2x4
    with pytest.raises(fxroof.FxroofError, match=r"Node `relu.*` .* in `1` \(ReLU\) failed"):
        g.time(repeats=1, warmup=0)


def test_timing_shows_its_progress(capsys):
    """A long `g.time()` from Python said nothing for minutes: it now shows a bar of its
    runs (stderr; a notebook widget under Jupyter), or calls the callable it is given."""
    g = fxroof.analyze(nn.Linear(4, 2), torch.randn(2, 4))
    seen = []
    g.time(repeats=3, warmup=1, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (4, 4) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    capsys.readouterr()
    g.time(repeats=2, warmup=0)  # progress=True by default
    err = capsys.readouterr().err
    assert "timing Linear" in err and "/2 " in err  # a bar of the 2 runs
    g.time(repeats=2, warmup=0, progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("eager_first", [False, True])
def test_the_eager_step_is_timed_after_the_nodes_or_before_them(monkeypatch, eager_first):
    """On a CPU what runs first changes what the next run faults in; the study times the
    eager step first (eager_first), the calibration after the node runs, as always."""
    from fxroof import timing

    order = []
    run, eager = timing.TimedProgram.run, timing.eager_step
    monkeypatch.setattr(timing.TimedProgram, "run",
                        lambda self, *a: order.append("nodes") or run(self, *a))
    monkeypatch.setattr(timing, "eager_step",
                        lambda *a: order.append("eager") or eager(*a))
    g = fxroof.analyze(nn.Linear(4, 2), torch.randn(3, 4), backward=True)
    report = g.time(repeats=2, warmup=0, progress=False, eager_first=eager_first)
    assert order.count("eager") == 1 and set(report.eager_s) == {"forward", "backward"}
    assert (order[0] == "eager") == eager_first and (order[-1] == "eager") != eager_first


def test_a_channels_last_analysis_is_timed_channels_last():
    """The timed run must take the analysed program's kernels: inputs and weights the graph
    recorded channels-last are made so (an NCHW convolution is another kernel)."""
    from fxroof import timing
    from fxroof.keys import SHAPES

    g = fxroof.analyze(torch.nn.Conv2d(3, 8, 3), torch.randn(2, 3, 8, 8),
                       memory_format="channels_last")
    metas = [n.meta[SHAPES] for n in g.forward.nodes if n.op == "placeholder"]
    laid = {tuple(m.shape): timing.laid_out(torch.randn(m.shape), m) for m in metas}
    assert set(laid) == {(8, 3, 3, 3), (8,), (2, 3, 8, 8)}  # weight, bias, input
    assert laid[(8, 3, 3, 3)].is_contiguous(memory_format=torch.channels_last)
    assert laid[(2, 3, 8, 8)].is_contiguous(memory_format=torch.channels_last)
    assert laid[(8,)].is_contiguous()


class _AutocastProbe(nn.Linear):
    """A linear layer that notes the autocast dtype its real (not fake) forward runs under."""

    def __init__(self):
        super().__init__(4, 2)
        self.seen = []

    def forward(self, x):
        from torch._subclasses.fake_tensor import is_fake

        if not is_fake(x):
            self.seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu")
                             else None)
        return super().forward(x)


@pytest.mark.parametrize("amp,dtype", [(None, None), ("bf16", torch.bfloat16)])
def test_the_eager_step_runs_under_the_recorded_autocast(amp, dtype):
    """The nodes of an --amp step are autocast's casts and lower-precision kernels; the eager
    step they are compared with must run the same precision, not fp32 (an H200 timed
    vit_b_16's bf16 nodes at 0.66x of an fp32 eager step)."""
    probe = _AutocastProbe()
    g = fxroof.analyze(probe, torch.randn(3, 4), amp=amp)
    assert any(r["dtype"] == "bfloat16" for r in g.records()) == (amp is not None)
    g.time(repeats=2, warmup=1, progress=False)
    assert probe.seen and set(probe.seen) == {dtype}


@pytest.mark.parametrize("device,ratio,warned", [("cuda", 3.33, True), ("cuda", 1.1, False),
                                                 ("cpu", 3.33, False)])
def test_a_gpu_whose_nodes_outlast_the_eager_step_is_said_to_wait_for_the_host(device, ratio,
                                                                              warned):
    """On an H200 vit_b_16 b32 bf16's nodes summed to 3.3x the eager step: the host
    issues a node slower than such a kernel runs, so each node's event time holds the
    device's wait. On a CPU the ratio means something else (it has no queue to starve)."""
    from fxroof.render import timing_lines

    timing = {"device": device, "repeats": 10, "warmup": 2, "overhead_s": 23e-6,
              "interpreted_s": {"forward": 0.0336}, "eager_s": {"forward": 0.0336 / ratio},
              "ratio": {"forward": ratio}}
    text = timing_lines(timing)
    assert ("waited for the host" in text) == warned
    if warned:
        assert "3.3x the eager step" in text and "23 us a" in text


def test_every_timed_node_carries_the_same_python_as_the_empty_node_subtracted():
    """The pass subtracts the cost of timing a node that does nothing, which is right only
    if what runs inside a timed region beside the op is the same for every node. An
    fx.Interpreter fetched each argument inside it: a convolution's nine cost 34 us more
    than the one-argument node measured, on a 2-core EPYC, and small models' node sums ran
    1.1-1.25x their generated code's time. Counted here in Python calls (a clock that reads
    how many have begun), the regions of a convolution, a ReLU and an empty node agree."""
    import sys

    from fxroof import timing

    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    g = fxroof.analyze(model, torch.randn(1, 3, 8, 8))
    state = timing.model_state(g.forward, model, torch.device("cpu"))
    inputs = timing.forward_inputs(g.forward, state, torch.device("cpu"))
    graph = torch.fx.Graph()
    graph.output(graph.call_function(timing._nothing, (graph.placeholder("x"),)))
    begun = [0]

    def count(frame, event, arg):
        begun[0] += event == "call"

    timer = CpuTimer(clock=lambda: begun[0])
    sys.setprofile(count)
    try:
        timing.TimedProgram(g.forward).run(timer, *inputs)
        timing.TimedProgram(graph, timed=lambda n: True).run(timer, torch.zeros(1))
    finally:
        sys.setprofile(None)
    regions = {str(n.target): calls for n, calls in timer.collect().items()}
    assert {"aten.convolution.default", "aten.relu.default"} <= set(regions)
    assert len(set(regions.values())) == 1, regions


def test_a_node_frees_what_it_consumed_after_its_timer_stops():
    """Releasing an input is not the op's work (an interpreter's bookkeeping did it after
    the node too): the generated code drops a node's last-used inputs after `_stop`."""
    from fxroof import timing

    g = fxroof.analyze(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Tanh()), torch.randn(2, 4))
    code = timing.TimedProgram(g.forward).module.code
    relu = next(n.name for n in g.forward.nodes if n.name.startswith("relu"))
    lines = code.splitlines()
    tanh = next(i for i, line in enumerate(lines) if f"tanh.default({relu})" in line)
    assert "None" not in lines[tanh]  # relu is consumed here, not released
    call, released = lines[tanh + 1].split(";", 1)
    assert "_stop" in call and f"{relu} = " in released
