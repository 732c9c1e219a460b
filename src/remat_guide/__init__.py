"""The field guide to jax.checkpoint: the exercise, its grader and tools to see what is saved."""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and editors; at run time each name loads on first use
    from remat_guide import (  # noqa: F401
        compare,
        diagram,
        exercise,
        fit,
        flops,
        grader,
        models,
        planner,
        residuals,
        sharded,
        tables,
        targets,
    )
    from remat_guide._labels import policy_label
    from remat_guide.compare import Comparison, PolicyRow, compare_policies, policy_table, recommend_policy
    from remat_guide.diagram import PolicyDiagram, policy_diagram
    from remat_guide.exercise import checkpoint_dot_policy
    from remat_guide.flops import FlopCount, Loop, count_flops
    from remat_guide.fwd_bwd import FwdBwd, fwd_bwd
    from remat_guide.grader import SolutionError, check_solution
    from remat_guide.planner import NamePlan, plan_names
    from remat_guide.residuals import Residual, Residuals, saved_residuals

__all__ = [
    "Comparison",
    "FlopCount",
    "FwdBwd",
    "Loop",
    "NamePlan",
    "PolicyDiagram",
    "PolicyRow",
    "Residual",
    "Residuals",
    "SolutionError",
    "check_solution",
    "checkpoint_dot_policy",
    "compare_policies",
    "count_flops",
    "fwd_bwd",
    "plan_names",
    "policy_diagram",
    "policy_label",
    "policy_table",
    "recommend_policy",
    "saved_residuals",
]

# Where each public name is defined. `import remat_guide` imports none of these modules (nor
# JAX): a name, or a submodule such as remat_guide.fit, is imported when first read (PEP 562).
_HOMES = {
    "policy_label": "_labels",
    **dict.fromkeys(["Comparison", "PolicyRow", "compare_policies", "policy_table", "recommend_policy"],
                    "compare"),
    **dict.fromkeys(["PolicyDiagram", "policy_diagram"], "diagram"),
    "checkpoint_dot_policy": "exercise",
    **dict.fromkeys(["FlopCount", "Loop", "count_flops"], "flops"),
    **dict.fromkeys(["FwdBwd", "fwd_bwd"], "fwd_bwd"),
    **dict.fromkeys(["SolutionError", "check_solution"], "grader"),
    **dict.fromkeys(["NamePlan", "plan_names"], "planner"),
    **dict.fromkeys(["Residual", "Residuals", "saved_residuals"], "residuals"),
}

SUBMODULES = ("cli", "compare", "diagram", "exercise", "fit", "flops", "fwd_bwd", "grader", "models", "planner",
              "residuals", "sharded", "tables", "targets")
"""The public submodules, each reachable as an attribute of the package (``remat_guide.fit``).

``remat_guide.site``, the pages' machinery, is imported by name (``from remat_guide import site``).
"""


class _Package(types.ModuleType):
    """The package's module type: a public name keeps its value when a submodule of that name loads.

    The import system binds each submodule to its package once it is loaded, and
    ``remat_guide.fwd_bwd`` names both a submodule and the function users call: the function
    stays, whichever is imported first.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _HOMES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    """A public name or submodule, imported on first use and then kept in the package."""
    if name in _HOMES:
        value = getattr(importlib.import_module(f"remat_guide.{_HOMES[name]}"), name)
    elif name in SUBMODULES:
        value = importlib.import_module(f"remat_guide.{name}")
    else:
        raise AttributeError(f"module 'remat_guide' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The package's names, with the public ones and the submodules not imported yet."""
    return sorted({*globals(), *__all__, *SUBMODULES})
