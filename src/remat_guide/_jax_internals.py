"""The JAX internals that remat_guide needs and JAX 0.12 has no public API for, in one place."""

from __future__ import annotations

from typing import Any

import jax.extend.backend

# XLA's cost analysis of one HLO computation: count_flops costs each loop body on its own.
# JAX exposes cost analysis only for a whole compiled program (Compiled.cost_analysis), and
# no public function parses HLO text, so both come from jaxlib's extension modules.
from jax._src.lib import _jax
from jaxlib import _hlo

__all__ = ["REQUIRED", "hlo_flops", "scan_operands", "traceback_frames"]

REQUIRED = {
    "jaxlib._hlo.hlo_module_from_text": (_hlo, "hlo_module_from_text"),
    "jax._src.lib._jax.hlo_module_cost_analysis": (_jax, "hlo_module_cost_analysis"),
}
"""The internal functions this module calls, as dotted names mapped to ``(module, attribute)``.

Two more internals are read as attributes, not called: a scan equation's ``ft_in``
parameter (:func:`scan_operands`, which raises a ValueError naming it when it is missing)
and a ``Traceback``'s ``frames`` (``traceback_frames``)."""


def hlo_flops(hlo_text: str) -> float:
    """XLA's FLOP count of an HLO module given as text, on the default backend.

    Args:
        hlo_text: A whole HLO module (``HloModule ...`` and an ``ENTRY`` computation).

    Returns:
        The ``"flops"`` entry of XLA's cost analysis (0.0 when XLA reports none).

    Examples:
        >>> from remat_guide._jax_internals import hlo_flops
        >>> hlo_flops('''HloModule m
        ...
        ... ENTRY %main (a: f32[4,4], b: f32[4,4]) -> f32[4,4] {
        ...   %a = f32[4,4] parameter(0)
        ...   %b = f32[4,4] parameter(1)
        ...   ROOT %d = f32[4,4] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
        ... }''')
        128.0
    """
    module = _hlo.hlo_module_from_text(hlo_text)
    costs: Any = _jax.hlo_module_cost_analysis(jax.extend.backend.get_backend(), module)
    return float(costs.get("flops", 0.0))


def scan_operands(params: dict[str, Any], operands: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """Split the operands of a ``scan`` equation into its constants, carry and scanned inputs.

    JAX 0.12 records the split in the equation's ``ft_in`` parameter (a flat tree of three
    groups), which is not public API.

    Args:
        params: The ``params`` of a jaxpr equation whose primitive is ``scan``.
        operands: One item per operand of that equation (its invars, or anything aligned
            with them).

    Returns:
        ``(consts, carry, xs)`` as lists, in operand order.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide._jax_internals import scan_operands
        >>> def step(carry, x):
        ...     return carry * 2.0 + x, None
        >>> jaxpr = jax.make_jaxpr(lambda c, xs: jax.lax.scan(step, c, xs))(1.0, jnp.ones(3))
        >>> eqn = jaxpr.eqns[0]
        >>> scan_operands(eqn.params, ["c", "xs"])
        ([], ['c'], ['xs'])
    """
    if "ft_in" not in params:
        raise ValueError(f"params: expected the params of a JAX 0.12 scan equation (with 'ft_in'), "
                         f"got keys {sorted(params)}")
    consts, carry, xs = params["ft_in"].update(list(operands)).unpack()
    return list(consts), list(carry), list(xs)


def traceback_frames(source_info: Any) -> list[tuple[str, str, int]]:
    """The Python frames an equation was traced in, innermost first, as ``(file, function, line)``.

    ``jax.extend.source_info_util`` exposes an equation's ``SourceInfo`` and ``summarize``,
    which names only the innermost frame outside JAX; the frames themselves are those of the
    ``SourceInfo``'s jaxlib ``Traceback``, whose ``frames`` are not public API.

    Args:
        source_info: An equation's ``source_info``.

    Returns:
        One ``(file name, qualified function name, line)`` per frame; empty when the
        equation has no traceback.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide._jax_internals import traceback_frames
        >>> def f(x):
        ...     return jnp.sin(x)
        >>> eqn = jax.make_jaxpr(f)(1.0).eqns[0]
        >>> [(function, line) for _, function, line in traceback_frames(eqn.source_info)
        ...  if function == "f"]
        [('f', 2)]
    """
    traceback = getattr(source_info, "traceback", None)
    if traceback is None:
        return []
    return [(frame.file_name, frame.function_name, frame.line_num) for frame in traceback.frames]
