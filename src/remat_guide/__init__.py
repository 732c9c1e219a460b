"""The field guide to jax.checkpoint: the exercise, its grader and tools to see what is saved."""

from remat_guide.exercise import checkpoint_dot_policy
from remat_guide.grader import SolutionError, check_solution
from remat_guide.residuals import Residual, Residuals, saved_residuals

__all__ = [
    "Residual",
    "Residuals",
    "SolutionError",
    "check_solution",
    "checkpoint_dot_policy",
    "saved_residuals",
]
