"""The JAX internals that remat_guide needs and JAX 0.12 has no public API for, in one place."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax.extend.backend

# XLA's cost analysis of one HLO computation: count_flops costs each loop body on its own.
# JAX exposes cost analysis only for a whole compiled program (Compiled.cost_analysis), and
# no public function parses HLO text, so both come from jaxlib's extension modules.
from jax._src import config
from jax._src.interpreters import mlir, pxla
from jax._src.lib import _jax
from jaxlib import _hlo

__all__ = ["REQUIRED", "CompiledText", "compile_arguments", "compile_as_kept", "compile_text", "file_names_only",
           "hlo_flops", "scan_operands", "traceback_frames"]

REQUIRED = {
    "jaxlib._hlo.hlo_module_from_text": (_hlo, "hlo_module_from_text"),
    "jax._src.lib._jax.hlo_module_cost_analysis": (_jax, "hlo_module_cost_analysis"),
    "jax._src.lib._jax.DeviceList": (_jax, "DeviceList"),
    "jax._src.interpreters.pxla.get_prop_to_input_output": (pxla, "get_prop_to_input_output"),
    "jax._src.interpreters.pxla._cached_compilation": (pxla, "_cached_compilation"),
    "jax._src.interpreters.mlir.make_ir_context": (mlir, "make_ir_context"),
    "jax._src.config.hlo_source_file_canonicalization_regex": (config, "hlo_source_file_canonicalization_regex"),
}
"""The internal functions this module calls, as dotted names mapped to ``(module, attribute)``.

Two more internals are read as attributes, not called: a scan equation's ``ft_in``
parameter (:func:`scan_operands`, which raises a ValueError naming it when it is missing)
and a ``Traceback``'s ``frames`` (``traceback_frames``)."""


@contextlib.contextmanager
def file_names_only() -> Iterator[None]:
    """Lower with source files named by their base name only (``_attention.py``, not its folder).

    A Pallas kernel's serialized IR records source files (Triton's its caller's, Mosaic's the
    kernel's own file inside JAX's installation), and ``Lowered.as_text`` keeps it whole; with
    the folders in it, the same program lowered in two checkouts would differ. JAX's
    ``jax_hlo_source_file_canonicalization_regex`` removes what its pattern matches from every
    source file it records; here, every folder.

    Examples:
        >>> import jax
        >>> from remat_guide._jax_internals import file_names_only
        >>> with file_names_only():
        ...     print(jax.config.jax_hlo_source_file_canonicalization_regex)
        .*/
    """
    with config.hlo_source_file_canonicalization_regex(".*/"):
        yield


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


def compile_arguments(lowered: Any) -> dict[str, Any]:
    """What ``lowered.compile()`` passes XLA besides the program's text and the options given to it.

    JAX's ``Lowered`` keeps them in its private lowering: the devices the program was
    lowered for (by id, in the order of the device assignment), whether its arguments go as
    one tuple, where XLA may choose an input's or output's sharding, and the compile options
    of the ``jax.jit`` call. With the program's text they are all :func:`compile_text` needs.

    Args:
        lowered: A ``jax.stages.Lowered`` of a ``jax.jit`` function.

    Returns:
        A JSON-serialisable dict.

    Examples:
        >>> import jax
        >>> from remat_guide._jax_internals import compile_arguments
        >>> arguments = compile_arguments(jax.jit(lambda x: 2.0 * x).lower(1.0))
        >>> arguments["devices"], arguments["propagate_to_outputs"]
        ([0], [True])
    """
    lowering = lowered._lowering
    args = lowering.compile_args
    to_inputs, to_outputs = pxla.get_prop_to_input_output(
        args["in_shardings"], args["out_shardings"], len(args["ordered_effects"]))
    return {"devices": [device.id for device in lowering._device_list],
            "tuple_args": bool(args["tuple_args"]),
            "propagate_to_inputs": [bool(flag) for flag in to_inputs],
            "propagate_to_outputs": [bool(flag) for flag in to_outputs],
            "jit_options": [list(pair) for pair in lowering._compiler_options_kvs]}


class CompiledText:
    """A program compiled by :func:`compile_text`, read as ``jax.stages.Compiled`` reads one."""

    def __init__(self, executable: Any) -> None:
        self._executable = executable

    def memory_analysis(self) -> Any:
        return self._executable.get_compiled_memory_stats()

    def cost_analysis(self) -> dict[str, float] | None:
        """XLA's cost analysis; ``None`` where the compiler gives none, as on a GPU."""
        try:
            return self._executable.cost_analysis()
        except _jax.JaxRuntimeError as error:
            if str(error).startswith("UNIMPLEMENTED"):
                return None
            raise

    def as_text(self) -> str:
        """The optimized HLO, as ``jax.stages.Compiled.as_text`` gives it."""
        if hasattr(self._executable, "get_hlo_text"):
            return self._executable.get_hlo_text()
        return "\n\n".join(module.to_string() for module in self._executable.hlo_modules())


def compile_text(text: str, devices: Any, arguments: dict[str, Any], options: dict[str, Any]) -> CompiledText:
    """Compiles a lowered program from its text, as ``lowered.compile(compiler_options=options)`` did.

    ``jax.stages.Lowered`` has no public constructor from a program's text, so this calls
    the function its ``compile`` calls, ``pxla._cached_compilation``, with what
    :func:`compile_arguments` kept.

    Args:
        text: ``lowered.as_text()``.
        devices: The devices whose ids ``arguments["devices"]`` lists, in any order.
        arguments: :func:`compile_arguments` of the lowered program.
        options: The ``compiler_options`` given to ``compile``.

    Returns:
        The compiled program, with ``memory_analysis()``, ``cost_analysis()`` and ``as_text()``.

    Raises:
        jax.errors.JaxRuntimeError: If the compiler refuses the program.

    Examples:
        >>> import jax
        >>> from remat_guide._jax_internals import compile_arguments, compile_text
        >>> lowered = jax.jit(lambda x: 2.0 * x).lower(1.0)
        >>> again = compile_text(lowered.as_text(), jax.devices(), compile_arguments(lowered), {})
        >>> again.memory_analysis().output_size_in_bytes == lowered.compile().memory_analysis().output_size_in_bytes
        True
    """
    by_id = {device.id: device for device in devices}
    device_list = _jax.DeviceList(tuple(by_id[number] for number in arguments["devices"]))
    kvs = tuple(tuple(pair) for pair in arguments["jit_options"]) + tuple(options.items())
    with mlir.make_ir_context():
        module = mlir.ir.Module.parse(text)
        executable = pxla._cached_compilation(
            module, "stored", arguments["tuple_args"], tuple(arguments["propagate_to_inputs"]),
            tuple(arguments["propagate_to_outputs"]), (), device_list[0].client, device_list, kvs, None)
    return CompiledText(executable)


def compile_as_kept(lowered: Any, options: dict[str, Any] | None = None) -> Any:
    """Compiles ``lowered`` from its text without source locations, as a store keeps the program.

    XLA's TPU compiler can plan memory differently for the same program with and without its
    source locations (they name its instructions): a two-layer splash-attention step planned
    21.8 MB of temp from its text and 16.4 MB from ``lowered.compile()``. Compiled this way, a
    program's figures depend on its kept text alone, so compiling that text again reproduces
    them. A program with host callbacks or ordered effects, which the text cannot carry, is
    compiled by ``lowered.compile()``.

    Args:
        lowered: A ``jax.stages.Lowered`` of a ``jax.jit`` function.
        options: The ``compiler_options`` to compile with.

    Returns:
        The compiled program, with ``memory_analysis()``, ``cost_analysis()`` and ``as_text()``.

    Raises:
        jax.errors.JaxRuntimeError: If the compiler refuses the program.

    Examples:
        >>> import jax
        >>> from remat_guide._jax_internals import compile_as_kept
        >>> compile_as_kept(jax.jit(lambda x: 2.0 * x).lower(1.0)).memory_analysis().output_size_in_bytes
        4
    """
    options = dict(options or {})
    args = lowered._lowering.compile_args
    if args.get("host_callbacks") or args.get("ordered_effects"):
        return lowered.compile(compiler_options=options) if options else lowered.compile()
    return compile_text(lowered.as_text(), lowered._lowering._device_list, compile_arguments(lowered), options)
