"""Where a residual comes from: its producer in the user's code, looked for inside scans and calls."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import sysconfig
from collections.abc import Callable, Sequence
from typing import Any

import jax.extend.core

from remat_guide._jax_internals import scan_operands, traceback_frames

__all__ = ["Origin", "Scope", "top_scope", "user_location"]

# Notebook cells are compiled from files like /tmp/ipykernel_12345/678.py, whose folder
# changes with every kernel, or "<cell N>" under remat_guide.site.page_setup: both show as "<cell>".
_NOTEBOOK_CELL = re.compile(r"ipykernel_\d+|^<cell \d+>$")

# Frames in these packages are the machinery around the user's code, never the line to name.
_LIBRARIES = ("jax", "jaxlib", "flax", "equinox", "remat_guide")
# ... except remat_guide's example models and the site's page code, which stand for user code.
_USER_CODE = ("remat_guide.models", "remat_guide.exercise", "remat_guide.site")

# Primitives that only re-round a value or move it (an offloading policy): a residual is
# reported as the value it came from.
_PASS_THROUGH = ("reduce_precision", "device_put")
# Primitives that call a jaxpr with the equation's operands and return its outputs as they are.
_CALLS = ("jit", "pjit", "closed_call", "core_call", "checkpoint", "remat", "remat2",
          "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "eval_jaxpr")

_STDLIB = sysconfig.get_path("stdlib") + os.sep
_SITE_PACKAGES = tuple(sysconfig.get_path(key) + os.sep for key in ("purelib", "platlib"))


def _prefix(name: str) -> str | None:
    """The folder of an imported package, the file of an imported module; None if not imported."""
    module = sys.modules.get(name)  # a module not imported ran no frame
    file_name = getattr(module, "__file__", None)
    if not file_name:
        return None
    return os.path.dirname(file_name) + os.sep if hasattr(module, "__path__") else file_name


def _machinery() -> Callable[[str], bool]:
    """Whether a frame's file is machinery around the user's code rather than the user's code."""
    libraries = tuple(p for p in map(_prefix, _LIBRARIES) if p)
    user_code = tuple(p for p in map(_prefix, _USER_CODE) if p)

    def skipped(file_name: str) -> bool:
        if file_name.startswith(user_code):
            return False
        in_stdlib = file_name.startswith(_STDLIB) and not file_name.startswith(_SITE_PACKAGES)
        return file_name.startswith(libraries) or in_stdlib or file_name.startswith("<frozen ")

    return skipped


def user_location(source_info: Any) -> str:
    """Where the user's code made an equation, as ``file:line (function)``.

    The innermost frame outside JAX, jaxlib, Flax, Equinox, remat_guide (except its example
    models and the site's page code) and the standard library is named, with the file's
    base name only, or ``<cell>`` for a notebook cell, so that the text is the same on
    every run.

    Args:
        source_info: An equation's ``source_info``.

    Returns:
        The location, or an empty string when no frame is the user's.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide._provenance import user_location
        >>> def f(x):
        ...     return jnp.sin(x)
        >>> user_location(jax.make_jaxpr(f)(1.0).eqns[0].source_info)
        '<doctest ...>:2 (f)'
    """
    skipped = _machinery()
    for file_name, function, line in traceback_frames(source_info):
        if skipped(file_name):
            continue
        shown = "<cell>" if _NOTEBOOK_CELL.search(file_name) else os.path.basename(file_name)
        return f"{shown}:{line} ({function})"
    return ""


@dataclasses.dataclass(frozen=True)
class Origin:
    """What a residual is: how :class:`remat_guide.Residual` describes it, without shape and dtype.

    ``stacked`` holds the lengths of the scans that stack the value (outermost first),
    ``within`` the location of each of those scans.
    """

    kind: str
    name: str
    location: str = ""
    stacked: tuple[int, ...] = ()
    within: tuple[str, ...] = ()


InputOrigin = Callable[[Any, tuple[int, ...], tuple[str, ...]], Origin]


class Scope:
    """One jaxpr whose values can be traced back to their producers.

    Args:
        jaxpr: An open jaxpr (``jax.extend.core.Jaxpr``).
        input_origin: Describes an input variable of ``jaxpr`` (one of its ``invars``)
            given the stacking found so far; its ``constvars`` are captured constants.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide._provenance import Origin, Scope
        >>> closed = jax.make_jaxpr(lambda x: jnp.cos(jax.jit(jnp.sin)(x)))(1.0)
        >>> scope = Scope(closed.jaxpr, lambda var, stacked, within: Origin("argument", "x"))
        >>> jit_output = closed.jaxpr.eqns[0].outvars[0]
        >>> scope.origin(jit_output).name, scope.origin(closed.jaxpr.invars[0]).kind
        ('sin', 'argument')
    """

    def __init__(self, jaxpr: Any, input_origin: InputOrigin) -> None:
        self._input_origin = input_origin
        self._producers = {var: (eqn, index) for eqn in jaxpr.eqns for index, var in enumerate(eqn.outvars)}
        self._through = {}
        for eqn in jaxpr.eqns:
            if eqn.primitive.name in _PASS_THROUGH and len(eqn.invars) == len(eqn.outvars):
                self._through.update(zip(eqn.outvars, eqn.invars))
        self._constvars = set(jaxpr.constvars)
        self._children: dict[int, Scope] = {}

    def source(self, var: Any) -> Any:
        """The variable a value came from before re-rounding or moving it."""
        while isinstance(var, jax.extend.core.Var) and var in self._through:
            var = self._through[var]
        return var

    def origin(self, var: Any, stacked: tuple[int, ...] = (), within: tuple[str, ...] = ()) -> Origin:
        """What produced ``var`` (an atom of this jaxpr), found inside scans and calls.

        ``stacked`` and ``within`` are the scans already passed through on the way here.
        """
        var = self.source(var)
        if not isinstance(var, jax.extend.core.Var):
            return Origin("constant", "literal", "", stacked, within)
        if var in self._producers:
            eqn, index = self._producers[var]
            return self._output_origin(eqn, index, stacked, within)
        if var in self._constvars:
            return Origin("constant", "captured", "", stacked, within)
        return self._input_origin(var, stacked, within)

    def _output_origin(self, eqn: Any, index: int, stacked: tuple[int, ...],
                       within: tuple[str, ...]) -> Origin:
        primitive = eqn.primitive.name
        if primitive == "scan":
            body, num_carry = self._scan_body(eqn)
            out = eqn.params["jaxpr"].jaxpr.outvars[index]
            if index < num_carry:  # the final carry: the body's carry output of the last iteration
                return body.origin(out, stacked, within)
            return body.origin(out, (*stacked, eqn.params["length"]), (*within, user_location(eqn.source_info)))
        called = _called_jaxpr(eqn)
        if called is not None:
            return self._call(eqn, called).origin(called.outvars[index], stacked, within)
        hi_prim = eqn.params.get("_prim")  # checkpoint_name(_fwd) under the jax_remat3 flag
        if primitive == "name":
            kind, name = "named", repr(eqn.params["name"])
        elif type(hi_prim).__name__ in ("CheckpointName", "CheckpointNameFwd"):
            kind, name = "named", repr(hi_prim.params["name"])
        else:
            kind, name = "primitive", primitive
        return Origin(kind, name, user_location(eqn.source_info), stacked, within)

    def _child(self, eqn: Any, make: Callable[[], Scope]) -> Scope:
        if id(eqn) not in self._children:
            self._children[id(eqn)] = make()
        return self._children[id(eqn)]

    def _call(self, eqn: Any, called: Any) -> Scope:
        operands = dict(zip(called.invars, eqn.invars))
        return self._child(eqn, lambda: Scope(
            called, lambda var, stacked, within: self.origin(operands[var], stacked, within)))

    def _scan_body(self, eqn: Any) -> tuple[Scope, int]:
        body = eqn.params["jaxpr"].jaxpr
        _, carry, _ = scan_operands(eqn.params, list(range(len(eqn.invars))))
        roles = {var: ("carry" if i in carry else "operand", eqn.invars[i]) for i, var in enumerate(body.invars)}

        def body_input(var: Any, stacked: tuple[int, ...], within: tuple[str, ...]) -> Origin:
            role, operand = roles[var]
            if role == "carry":  # the value each iteration receives: no producer of its own
                return Origin("carry", "carry", "", stacked, within)
            # A constant is the same in every iteration; a scanned input stacked over this
            # scan is the operand itself.
            return self.origin(operand, stacked, within)

        return self._child(eqn, lambda: Scope(body, body_input)), len(carry)


def _called_jaxpr(eqn: Any) -> Any:
    """The open jaxpr a call-like equation runs on its operands, or None."""
    if eqn.primitive.name not in _CALLS:
        return None
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        called = eqn.params.get(key)
        called = getattr(called, "jaxpr", called)  # a ClosedJaxpr holds an open one
        if (isinstance(called, jax.extend.core.Jaxpr) and len(called.invars) == len(eqn.invars)
                and len(called.outvars) == len(eqn.outvars)):
            return called
    return None


def top_scope(jaxpr: Any, argument_names: Sequence[str]) -> Scope:
    """The scope of a traced function's jaxpr, whose inputs are the named arguments."""
    names = dict(zip(jaxpr.invars, argument_names))
    return Scope(jaxpr, lambda var, stacked, within: Origin("argument", names.get(var, "unknown"), "", stacked,
                                                            within))
