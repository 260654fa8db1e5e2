"""The user's own models: ``package.module:callable`` or ``path/to/file.py:callable``
returning an nn.Module."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
from typing import Optional

from torch import nn

from fxroof.device import out_of_memory
from fxroof.errors import FxroofError
from fxroof.models.base import construct, ensure_module


def build(spec: str, device: str = "meta") -> nn.Module:
    """The module ``spec`` names, built on ``device``: on the meta device where its
    constructor allows (as a named model is: analysis allocates no weight, so a model too
    large for this machine's memory is analysed all the same), else for real."""
    # The last ':' splits, so that a Windows path (C:\\models\\net.py:Net) keeps its drive.
    module_name, _, attr = spec.rpartition(":")
    if os.getcwd() not in sys.path:  # like uvicorn/gunicorn: the user's project is importable
        sys.path.insert(0, os.getcwd())
    if not module_name.endswith(".py") and ("/" in module_name or os.sep in module_name
                                            or os.path.isfile(module_name)):
        raise FxroofError(
            f"The model spec '{spec}' names '{module_name}', a path that is not a Python file: "
            "the part before ':' is a .py file (path/to/net.py:Net) or an importable module "
            "(package.module:Net).")
    try:
        if module_name.endswith(".py"):
            module = _import_file(module_name)
        else:
            module = importlib.import_module(module_name)
    except FxroofError:
        raise
    except SystemExit as e:  # a script's argparse or sys.exit at import time
        raise FxroofError(
            f"Importing '{module_name}' (from the model spec '{spec}') ended the program: it "
            f"called sys.exit({e.code!r}) -- argparse does so when the arguments are not its "
            "own. fxroof imports the file to build the model: put the script's own work "
            "(argument parsing, training) under `if __name__ == \"__main__\":`.") from None
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # GeneratorExit, a library's own BaseException: still its error
        hint = ("Fix that error in the file (running `python` on it shows where it is)"
                if module_name.endswith(".py") else
                "Check that the package is installed or on PYTHONPATH and that the spec has "
                "the form 'package.module:callable' or 'path/to/file.py:callable'")
        raise FxroofError(f"Cannot import '{module_name}' from the model spec '{spec}': "
                          f"{type(e).__name__}: {e}. {hint}.") from None
    target = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise FxroofError(
                f"'{module_name}' has no attribute '{attr}' (from the model spec '{spec}'). "
                "The part after ':' must name a callable that returns an nn.Module.")
    try:
        model = construct(target, device) if callable(target) and \
            not isinstance(target, nn.Module) else target
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # SystemExit too: a constructor that calls sys.exit
        hint = ("Its weights need more memory than is free here: `fxroof annotate` and "
                "`fxroof predict` analyse it without allocating them; timing it needs them"
                if out_of_memory(e) else "The callable must build the model with no arguments")
        raise FxroofError(f"Calling '{spec}' to build the model failed: "
                          f"{type(e).__name__}: {e}. {hint}.") from None
    return ensure_module(model, spec)


def callable_missing(spec: str) -> FxroofError:
    """The error for a Python file named without the callable in it (``net.py``, not
    ``net.py:Net``): fxroof cannot guess which of its names builds the model, so it lists
    them, read off the file's syntax (importing it would run the user's code)."""
    if not os.path.isfile(spec):
        what = "is not a regular file" if os.path.exists(spec) else \
            f"does not exist (looked in {os.getcwd()})"
        return FxroofError(f"The model spec '{spec}' names a Python file that {what}. Give "
                           "the path to a .py file and, after ':', what in it builds the "
                           "model: models/net.py:Net.")
    names = _candidates(spec)
    example = f"{spec}:{names[0]}" if names else f"{spec}:Net"
    if names is None:
        found = " (Its text does not parse as Python: `python` on it shows where.)"
    elif names:
        found = f" It defines {', '.join(names[:8])}{', ...' if len(names) > 8 else ''}."
    else:
        found = " It defines no class or function at its top level."
    return FxroofError(f"'{spec}' is a Python file, and fxroof needs to know what in it "
                       f"builds the model: add ':' and its name, e.g. {example} (a class or "
                       f"function called with no arguments, or an nn.Module).{found}")


def _candidates(path: str) -> Optional[list[str]]:
    """A file's top-level classes (those deriving from a ...Module first), functions and
    names bound to a call, as written; None where it does not parse."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError, RecursionError):  # RecursionError: nesting
        return None
    modules, others = [], []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(b) for b in node.bases]
            (modules if any(b.endswith("Module") for b in bases) else others).append(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and not node.name.startswith("_"):
            others.append(node.name)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            others += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return modules + others


def _import_file(path: str):
    """The module a Python file defines, imported as a script's neighbours would see it: its
    folder on sys.path (so its own imports of sibling files work) and under its file name."""
    if os.path.exists(path) and not os.path.isfile(path):  # a device, a pipe, a link to one
        raise FxroofError(f"The model spec names '{path}', which is not a regular file: give "
                          "the path to a .py file that defines the model, e.g. "
                          "models/net.py:Net.")
    if not os.path.isfile(path):
        raise FxroofError(f"The model spec names the file '{path}', which does not exist "
                          f"(looked in {os.getcwd()}). Give the path to a .py file that defines "
                          "the model, e.g. models/net.py:Net.")
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = os.path.splitext(os.path.basename(path))[0]
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) != \
            os.path.abspath(path):
        name = f"fxroof_user_{abs(hash(os.path.abspath(path)))}"  # a name taken by a package
    file_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(file_spec)
    sys.modules[name] = module  # dataclasses and pickling look classes up here
    try:
        file_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
