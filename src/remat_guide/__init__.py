"""The field guide to jax.checkpoint: the exercise, its grader and tools to see what is saved."""

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
