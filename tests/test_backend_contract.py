"""Every backend module provides every function of dmlops.backends.contract, with a compatible signature."""

from __future__ import annotations

import importlib
import inspect

import pytest

from dmlops.backends.contract import Backend


def contract_functions():
    return {name: getattr(Backend, name) for level in Backend.__mro__[1:] if level.__module__ == Backend.__module__
            for name in level.__dict__ if not name.startswith("_")}


def incompatibility(function, promised) -> str | None:
    """Why ``function`` cannot be called as ``promised`` (less its self) is, or None: it takes the promised
    parameters by the same names, kinds and positions; any further ones have defaults."""
    given = list(inspect.signature(function).parameters.values())
    wanted = list(inspect.signature(promised).parameters.values())[1:]
    for index, parameter in enumerate(wanted):
        if index >= len(given) or (given[index].name, given[index].kind) != (parameter.name, parameter.kind):
            return f"parameter {index} should be {parameter}, not {given[index] if index < len(given) else 'absent'}"
        if (given[index].default is inspect.Parameter.empty) != (parameter.default is inspect.Parameter.empty):
            return f"{parameter.name}: a default where the contract has none, or none where it has one"
    extra = [p for p in given[len(wanted):] if p.default is inspect.Parameter.empty and p.kind not in
             (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    return f"further parameters without defaults: {extra}" if extra else None


@pytest.mark.parametrize("name", ["cpu", "cuda"])
def test_backend_provides_the_contract(name):
    if name == "cuda":
        pytest.importorskip("triton")
    backend = importlib.import_module(f"dmlops.backends.{name}")
    functions = contract_functions()
    assert len(functions) > 20
    problems = {function_name: "missing" if not callable(getattr(backend, function_name, None)) else
                incompatibility(getattr(backend, function_name), promised)
                for function_name, promised in functions.items()}
    assert {k: v for k, v in problems.items() if v} == {}
