"""Accelerator programs on the pages: what ``lowered.compile()`` reports, read from the figure store."""

from __future__ import annotations

import types
from typing import Any

from remat_guide import _cache as cache
from remat_guide.targets import Target, target

__all__ = ["StoredCompile", "compile_ahead", "instruction_counts"]


class StoredCompile:
    """The figures of one compiled accelerator program, as ``jax.stages.Compiled`` reports them.

    Attributes:
        instructions: How many HLO instructions of each opcode the compiled program has.
        log: The lines XLA logged while compiling it (when ``compile_ahead`` was asked for them).
        kernels: Its kernels' FLOPs and bytes, for :func:`remat_guide.targets.estimate_step`;
            ``None`` for a program the compiler refused.
    """

    def __init__(self, figures: dict[str, Any]) -> None:
        self._figures = figures
        self.instructions: dict[str, int] = dict(figures["instructions"])
        self.log: list[str] = list(figures.get("log", []))
        self.kernels: dict[str, Any] | None = figures.get("kernels")

    @property
    def matmul_flops(self) -> int:
        """The FLOPs of its kernels' matrix multiplications, each loop body once per iteration."""
        return sum(count * sum(kinds.values()) for count, kinds, *_ in self.kernels["kernels"])

    def memory_analysis(self) -> Any:
        """Every size of ``compiled.memory_analysis()``, as attributes (``temp_size_in_bytes``, ...)."""
        return types.SimpleNamespace(**self._figures["memory"])

    def cost_analysis(self) -> dict[str, float] | None:
        """``compiled.cost_analysis()``: a dict of floats, or ``None`` where the compiler gives none (GPUs)."""
        cost = self._figures["cost"]
        return None if cost is None else dict(cost)


def compile_ahead(lowered: Any, name: str | Target, compiler_options: dict[str, Any] | None = None,
                  log: bool = False) -> StoredCompile:
    """``lowered.compile(compiler_options=...)`` for a program lowered on a target's devices, from the figure store.

    The build reads the figures of a program compiled before (by its text, the target, the
    compiler's version and the options) and compiles only what the store lacks; ``make test``
    compiles a sample of the store again and fails on any difference.

    Args:
        lowered: ``jax.jit(f).lower(*place(args, name))``.
        name: The target the arguments were placed on (see :data:`remat_guide.targets.TARGETS`).
        compiler_options: Passed to ``lowered.compile``.
        log: Whether to keep the lines XLA logs while compiling (``StoredCompile.log``).

    Returns:
        The compiled program's figures.

    Raises:
        jax.errors.JaxRuntimeError: If the compiler refuses the program, with its message.
    """
    chosen = target(name)
    return StoredCompile(cache.target_figures(lowered, chosen.name, chosen.platform, compiler_options, log))


def instruction_counts(text: str) -> dict[str, int]:
    """The count of each HLO opcode in ``compiled.as_text()``, as the figure store counts them."""
    return cache.instruction_counts(text)
