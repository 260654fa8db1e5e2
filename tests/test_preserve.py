"""analyze() leaves the user's module exactly as it was: parameter identity and values,
buffers, training flags, hooks, requires_grad, devices, classes -- over a corpus of the module
shapes that break naive parameter swapping."""
import pytest
import torch
from torch import nn

import fxroof


class SharedSubmodule(nn.Module):
    """One Linear registered under two names: functional_call used to restore FakeTensors."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class TiedWeights(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.embed(tokens))


class WithHooks(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)
        self.calls = 0
        self.fc.register_forward_hook(self._count)
        self.fc.register_forward_pre_hook(lambda m, args: None)
        self.handle = self.bn.register_forward_hook(self._once)

    def _count(self, module, args, out):
        self.calls += 1

    def _once(self, module, args, out):
        self.handle.remove()  # a hook that unregisters itself

    def forward(self, x):
        return self.bn(self.fc(x))


def weight_norm_model():
    return nn.Sequential(nn.utils.parametrizations.weight_norm(nn.Linear(4, 4)), nn.ReLU())


def spectral_norm_model():
    return nn.Sequential(nn.utils.parametrizations.spectral_norm(nn.Linear(4, 4)), nn.Tanh())


def frozen_partly():
    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    m[0].weight.requires_grad_(False)
    return m


def on_meta():
    with torch.device("meta"):
        return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))


def scripted():
    return torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))


CORPUS = {
    "shared submodule": (SharedSubmodule, lambda: torch.randn(2, 4)),
    "tied weights": (TiedWeights, lambda: torch.randint(0, 10, (2, 3))),
    "hooks": (WithHooks, lambda: torch.randn(2, 4)),
    "weight_norm": (weight_norm_model, lambda: torch.randn(2, 4)),
    "spectral_norm": (spectral_norm_model, lambda: torch.randn(2, 4)),
    "partly frozen": (frozen_partly, lambda: torch.randn(2, 4)),
    "meta device": (on_meta, lambda: torch.randn(2, 4)),
    "batchnorm eval": (lambda: nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).eval(),
                       lambda: torch.randn(2, 4)),
}


def state_of(module: nn.Module) -> dict:
    """Everything a user could notice, by identity and by value."""
    def tensors(named):
        return [(name, id(t), type(t), t.requires_grad, t.device, t.dtype, tuple(t.shape),
                 None if t.is_meta else t.detach().clone())
                for name, t in named]

    return {
        "parameters": tensors(module.named_parameters(remove_duplicate=False)),
        "buffers": tensors(module.named_buffers(remove_duplicate=False)),
        "modules": [(name, id(m), type(m), m.training,
                     {k: (len(v), tuple(v)) for k, v in vars(m).items() if k.endswith("hooks")})
                    for name, m in module.named_modules(remove_duplicate=False)],
    }


def assert_same_state(before: dict, after: dict) -> None:
    for key in ("parameters", "buffers"):
        assert len(before[key]) == len(after[key]), key
        for b, a in zip(before[key], after[key]):
            assert b[:7] == a[:7], f"{key} {b[0]} changed: {b[:7]} -> {a[:7]}"
            if b[7] is not None:
                assert torch.equal(b[7], a[7]), f"{key} {b[0]}: values changed"
    assert before["modules"] == after["modules"]


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("case", sorted(CORPUS))
def test_analyze_leaves_the_module_unchanged(case, backward):
    build, make_input = CORPUS[case]
    module = build()
    x = make_input()
    before = state_of(module)
    g = fxroof.analyze(module, x, backward=backward)
    assert g.totals()["overall"]["nodes"] > 0
    assert_same_state(before, state_of(module))


def test_shared_submodule_keeps_real_weights_and_counts_both_calls():
    module = SharedSubmodule()
    weight = module.a.weight
    g = fxroof.analyze(module, torch.randn(2, 4))
    assert module.a.weight is weight and module.b.weight is weight
    assert type(weight) is nn.Parameter  # not a FakeTensor
    # two calls of the one Linear: 2 x (2 rows x 4 outputs x 4 inputs) MACs
    assert g.totals()["overall"]["macs"] == 2 * 2 * 4 * 4


def test_scripted_module_is_unchanged_or_refused_clearly():
    module = scripted()
    before = state_of(module)
    try:
        fxroof.analyze(module, torch.randn(2, 4), backward=True)
    except fxroof.FxroofError:
        pass
    assert_same_state(before, state_of(module))


def test_lazy_module_is_refused_and_left_uninitialised():
    module = nn.Sequential(nn.LazyLinear(4))
    with pytest.raises(fxroof.FxroofError, match="lazy"):
        fxroof.analyze(module, torch.randn(2, 3))
    assert isinstance(module[0].weight, nn.parameter.UninitializedParameter)
    assert type(module[0]) is nn.LazyLinear


def test_failing_forward_still_restores_the_module():
    module = nn.Sequential(nn.Linear(4, 4), nn.Linear(5, 5))  # the second layer rejects x
    module.eval()
    before = state_of(module)
    with pytest.raises(fxroof.FxroofError):
        fxroof.analyze(module, torch.randn(2, 4), backward=True)  # flips to train internally
    assert_same_state(before, state_of(module))


def test_input_requiring_grad_is_differentiated():
    class Square(nn.Module):  # no parameters at all
        def forward(self, x):
            return (x * x).sum()

    g = fxroof.analyze(Square(), torch.randn(3, 5, requires_grad=True), backward=True)
    # d/dx sum(x*x) = 2x: the backward graph holds the multiplications that make it
    assert g.backward is not None and g.totals()["backward"]["flops"] >= 15


def test_no_parameters_and_no_grad_input_is_named_as_such():
    class Square(nn.Module):
        def forward(self, x):
            return x * x

    with pytest.raises(fxroof.FxroofError, match="no parameters"):
        fxroof.analyze(Square(), torch.randn(3), backward=True)
