"""The JAX internals that remat_guide needs and JAX 0.12 has no public API for, in one place."""

from __future__ import annotations

from typing import Any

import jax.extend.backend

# XLA's cost analysis of one HLO computation: count_flops costs each loop body on its own.
# JAX exposes cost analysis only for a whole compiled program (Compiled.cost_analysis), and
# no public function parses HLO text, so both come from jaxlib's extension modules.
from jax._src.lib import _jax
from jaxlib import _hlo

__all__ = ["REQUIRED", "hlo_flops"]

REQUIRED = {
    "jaxlib._hlo.hlo_module_from_text": (_hlo, "hlo_module_from_text"),
    "jax._src.lib._jax.hlo_module_cost_analysis": (_jax, "hlo_module_cost_analysis"),
}
"""Each internal this module uses, by its dotted name: ``(module, attribute)``."""


def hlo_flops(hlo_text: str) -> float:
    """XLA's FLOP count of an HLO module given as text, on the default backend.

    Args:
        hlo_text: A whole HLO module (``HloModule ...`` and an ``ENTRY`` computation).

    Returns:
        The ``"flops"`` entry of XLA's cost analysis (0.0 when XLA reports none).

    Examples:
        >>> from remat_guide.jax_internals import hlo_flops
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
