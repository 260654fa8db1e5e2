"""The dependency contract, checked over the source itself (ast, no imports needed).

* imports run one way: every fxroof module sits in a layer and imports only from its own
  layer's leaves and the layers below it (LAYERS, bottom first); there are no cycles;
* fxroof's own modules are imported at the top of a module, never inside a function, except
  where an import is deliberately deferred (ALLOWED_LOCAL, each with its reason);
* no function is longer than MAX_FUNCTION_LINES;
* importing fxroof and drawing a figure leaves matplotlib's backend alone (notebooks).
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import networkx as nx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("fxroof", "op_costs")
MAX_FUNCTION_LINES = 60

# Bottom first. A module may import any module of a lower layer, and modules of its own
# layer only where the list below says so (INTRA_LAYER): a layer is a set of peers.
LAYERS = [
    # leaves: what many modules need (no torch below layer 2, so the CLI parses without it)
    {"fxroof.errors", "fxroof.version", "fxroof.defaults", "fxroof.op_classes",
     "fxroof.interrupts"},
    {"fxroof.units", "fxroof.keys", "fxroof.suggest", "fxroof.timers", "fxroof.files",
     "fxroof.kernel", "fxroof.target", "fxroof.hidden_bytes", "fxroof.heap", "fxroof.pipeline",
     "fxroof.launch_geometry", "op_costs"},
    # the time model: its op classes and hidden bytes are the layers under it
    {"fxroof.validate", "fxroof.device", "fxroof.target_dispatch", "fxroof.calibration"},
    # capture and the passes that annotate node.meta
    {"fxroof.scope", "fxroof.guard", "fxroof.rollups", "fxroof.chips"},
    {"fxroof.capture"},
    {"fxroof.step"},
    {"fxroof.cost_pass", "fxroof.memory", "fxroof.models", "fxroof.plan_builds"},
    # a node on a chip: its roof; what the time model reads of the chip, and the kernels a
    # node runs that its bytes do not show; its expected time under that roof; then the
    # pass that writes both into a graph and prices a step
    {"fxroof.roofline"},
    {"fxroof.chip_params"},
    {"fxroof.hidden_kernels"},
    {"fxroof.time_model"},
    {"fxroof.prediction"},
    # passes over an annotated graph and its renderers: they read node.meta and records
    {"fxroof.timing", "fxroof.export", "fxroof.render", "fxroof.trace",
     "fxroof.measure", "fxroof.latency"},
    # figures: plain rows on roofs (the roof rules come from roofline)
    {"fxroof.plots", "fxroof.interactive"},
    # the canonical artefact: plain data and views, with one-line conveniences over the above
    {"fxroof.graph"},
    {"fxroof.page_faults", "fxroof.inductor_memory"},
    # what Inductor lowers: where a region's modules sit in the model, a region's
    # annotation, and a CUDA target's device answered
    {"fxroof.region_modules"},
    {"fxroof.compile_backend", "fxroof.gpu_lowering"},
    {"fxroof.between_regions"},
    {"fxroof.compiled"},
    {"fxroof.analysis"},
    {"fxroof.recording", "fxroof.measured"},
    {"fxroof.compiled_probes", "fxroof.model_probes"},
    {"fxroof.roofline_points", "fxroof.probes"},
    # the top: the package's public face, the study and the command line
    {"fxroof", "fxroof.study"},
    {"fxroof.commands"},
    {"fxroof.cli"},
    {"fxroof.__main__"},
]
# (importer, imported) pairs allowed inside one layer, each an honest peer dependency
INTRA_LAYER: set = set()
# function-local imports of fxroof's own modules that are deferred on purpose
ALLOWED_LOCAL = {
    # the command line parses arguments before importing torch, so Ctrl-C during that
    # second-long import exits 130 without a traceback, and --help/--version are instant
    ("fxroof.cli", "fxroof.commands"),
    # Inductor's import (about 2 s of a 2-core machine's 10 s start) only where a compiled
    # view or compiled probes are asked for: the quick `chips measure` stays under 30 s
    ("fxroof.analysis", "fxroof.compiled"),
    ("fxroof.probes", "fxroof.compiled_probes"),
}


def _modules() -> dict[str, str]:
    """{dotted module name: path} for every .py file of the packages."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(folder, f)
                    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found[rel.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str:
    """The module an import names, or the package it belongs to."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _layer_of(module: str) -> int:
    """Layer index of a module; a subpackage's modules share their package's layer."""
    for depth in (module, *(module.rsplit(".", k)[0] for k in range(1, module.count(".")))):
        for i, layer in enumerate(LAYERS):
            if depth in layer:
                return i
    raise AssertionError(f"{module} is in no layer of LAYERS: place it")


def _imports(module: str, path: str):
    """(imported module, is function-local, line) for each import of fxroof/op_costs."""
    with open(path) as f:
        tree = ast.parse(f.read())
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    local_lines = {n.lineno for fn in ast.walk(tree)
                   if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] in PACKAGES:
                target = _resolve(name)
                if target and target != module:
                    yield target, node.lineno in local_lines, node.lineno


def _graph() -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(MODULES)
    for module, path in MODULES.items():
        for target, _, line in _imports(module, path):
            g.add_edge(module, target, line=line)
    return g


def test_no_import_cycles():
    cycles = list(nx.simple_cycles(_graph()))
    assert cycles == [], f"import cycles: {cycles[:5]}"


def test_imports_run_one_way():
    wrong = []
    for module, target, data in _graph().edges(data=True):
        if module.split(".")[0] != "fxroof" or target == "op_costs" or \
                target.startswith("op_costs."):
            continue  # op_costs is one leaf package, checked as a whole below
        mine, theirs = _layer_of(module), _layer_of(target)
        same_package = target.startswith(module + ".") or module.startswith(target + ".") \
            or module.rpartition(".")[0] == target.rpartition(".")[0] != "fxroof"
        if theirs > mine or (theirs == mine and not same_package
                             and (module, target) not in INTRA_LAYER):
            wrong.append(f"{module}:{data['line']} imports {target}")
    assert wrong == [], "imports against the layers:\n" + "\n".join(wrong)


def test_op_costs_imports_nothing_of_fxroof():
    leaks = [f"{m} imports {t}" for m, t in _graph().edges()
             if m.split(".")[0] == "op_costs" and t.split(".")[0] == "fxroof"]
    assert leaks == []


def test_no_function_local_imports_of_our_own_modules():
    found = [f"{os.path.relpath(path, ROOT)}:{line} imports {target}"
             for module, path in MODULES.items()
             for target, local, line in _imports(module, path)
             if local and (module, target) not in ALLOWED_LOCAL]
    assert found == [], "import these at the top of the module:\n" + "\n".join(found)


def test_no_function_is_too_long():
    long = []
    for module, path in MODULES.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = fn.end_lineno - fn.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{os.path.relpath(path, ROOT)}:{fn.lineno} {fn.name} "
                                f"({lines} lines)")
    assert long == [], f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_the_contract_checker_sees_a_cycle_and_a_local_import(tmp_path):
    """The checks above must be able to fail: an import cycle and a function-local import
    written into a scratch module are found by the same helpers."""
    path = tmp_path / "scratch.py"
    path.write_text("import fxroof.units\n\ndef f():\n    from fxroof import errors\n")
    found = list(_imports("fxroof.scratch", str(path)))
    assert ("fxroof.units", False, 1) in found and ("fxroof.errors", True, 4) in found
    g = nx.DiGraph([("a", "b"), ("b", "a")])
    assert list(nx.simple_cycles(g))


def test_the_command_line_parses_without_importing_torch():
    """`fxroof --help` answers at once, and Ctrl-C during torch's import (which the command
    line defers until the arguments parse) exits 130 like one during a run."""
    script = "import sys, fxroof, fxroof.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("backend", ["svg", "pdf"])
def test_import_and_plot_leave_the_matplotlib_backend_alone(tmp_path, backend):
    """A notebook has chosen its backend; `import fxroof` and drawing a figure keep it, and
    leave no figure open in pyplot's registry."""
    script = textwrap.dedent(f"""
        import matplotlib
        matplotlib.use({backend!r})
        import matplotlib.pyplot as plt
        import fxroof
        from fxroof import plots
        from fxroof.chips import load_chips
        chips = [c for c in load_chips().values() if c.id in ("t4", "a100_sxm_80gb")]
        plots.plot_chips(chips, {str(tmp_path / "c.png")!r})
        fxroof.plot_roofline(["resnet18"], ["t4"], {str(tmp_path / "r.png")!r})
        print(matplotlib.get_backend(), len(plt.get_fignums()))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [backend, "0"]
    assert (tmp_path / "c.png").exists() and (tmp_path / "r.png").exists()
