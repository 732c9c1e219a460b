"""The shard_map page's counters: collectives in a jaxpr and in compiled HLO, with their bytes."""

from __future__ import annotations

import collections
import re
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

__all__ = ["HLO_OF", "HLO_OPS", "hlo_collectives", "jaxpr_collectives"]

HLO_OF = {"psum": "all-reduce", "psum_invariant": "all-reduce", "all_gather": "all-gather",
          "all_gather_invariant": "all-gather", "reduce_scatter": "reduce-scatter",
          "ppermute": "collective-permute", "all_to_all": "all-to-all"}
"""The jaxpr primitive of each communicating collective, and the HLO operation it lowers to.

``pvary`` (and ``pbroadcast``) are left out: they change a value's type inside
``shard_map``, and no data moves.
"""

HLO_OPS = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
"""The HLO collectives :func:`hlo_collectives` counts."""

# "%name = f32[8,64]{1,0} op(" or a tuple shape "(f32[8]{0}, f32[4]{0}) op(".
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\([^=]*?\)|\S+) ([a-z][\w-]*)\((.*)$")
_ARRAY = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")
_OPERAND = re.compile(r"%([^\s,)]+)")


def _sub_jaxprs(eqn: Any) -> Iterator[Any]:
    yield from jax.extend.core.jaxprs_in_params(eqn.params)


def _count(jaxpr: Any, counts: collections.Counter) -> None:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in HLO_OF:
            counts[eqn.primitive.name] += 1
        for sub in _sub_jaxprs(eqn):
            _count(sub, counts)


def jaxpr_collectives(jaxpr: Any) -> dict[str, int]:
    """How many times each collective primitive appears in a jaxpr, nested jaxprs included.

    A nested jaxpr (the body of a ``shard_map`` or of a checkpoint) is counted once per
    equation that calls it, so a checkpointed layer applied twice counts twice. A loop
    body (``scan``, ``while``) is counted once, not once per iteration.

    Args:
        jaxpr: A ``jax.make_jaxpr`` result (``ClosedJaxpr``) or an open ``Jaxpr``.

    Returns:
        Counts by primitive name, only those present, in the order of ``HLO_OF``.

    Raises:
        TypeError: If ``jaxpr`` is neither a ``Jaxpr`` nor a ``ClosedJaxpr``.

    Examples:
        >>> import jax
        >>> from jax.sharding import PartitionSpec as P
        >>> from jax.sharding import AxisType
        >>> mesh = jax.make_mesh((1,), ("i",), axis_types=(AxisType.Auto,))
        >>> f = jax.shard_map(lambda x: jax.lax.psum(x, "i"), mesh=mesh,
        ...                   in_specs=P("i"), out_specs=P())
        >>> jaxpr_collectives(jax.make_jaxpr(f)(jax.numpy.ones(4)))
        {'psum_invariant': 1}
    """
    core = jax.extend.core
    if isinstance(jaxpr, core.ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    if not isinstance(jaxpr, core.Jaxpr):
        raise TypeError(f"jaxpr must be a Jaxpr or ClosedJaxpr, got {type(jaxpr).__name__}")
    counts: collections.Counter = collections.Counter()
    _count(jaxpr, counts)
    return {name: counts[name] for name in HLO_OF if counts[name]}


def _nbytes(shape: str) -> int:
    total = 0
    for dtype, dims in _ARRAY.findall(shape):
        size = int(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64))
        bits = 1 if dtype == "pred" else int(re.sub(r"\D", "", dtype) or 8)
        total += size * max(bits // 8, 1)
    return total


def hlo_collectives(text: str) -> dict[str, tuple[int, int]]:
    """Each collective of an HLO module's text: how many, and their operands' bytes.

    The bytes are the sizes of the operands each instruction sends, summed: what one
    device hands to the collective, not what crosses the wire (a ring all-reduce moves
    about twice its operand). Every instruction counts once, whatever computation holds
    it: a collective in a loop body counts once, not once per iteration.

    Args:
        text: ``compiled.as_text()`` (or any HLO module's text).

    Returns:
        ``{operation: (count, operand bytes)}`` for each operation of ``HLO_OPS`` present.

    Raises:
        TypeError: If ``text`` is not a string.
        ValueError: If a collective's operand is not defined in ``text``.

    Examples:
        >>> hlo = '''
        ... ENTRY %main (p: f32[8,64]) -> f32[8,64] {
        ...   %p = f32[8,64]{1,0} parameter(0)
        ...   ROOT %all-reduce.1 = f32[8,64]{1,0} all-reduce(%p), channel_id=1
        ... }'''
        >>> hlo_collectives(hlo)
        {'all-reduce': (1, 2048)}
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be HLO text (a str), got {type(text).__name__}")
    shapes: dict[str, str] = {}
    found: list[tuple[str, str]] = []
    for line in text.splitlines():
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        name, shape, op, rest = match.groups()
        shapes[name] = shape
        if op in HLO_OPS:
            found.append((op, rest.split(")", 1)[0]))
    totals: dict[str, list[int]] = {}
    for op, operands in found:
        sent = 0
        for operand in _OPERAND.findall(operands):
            if operand not in shapes:
                raise ValueError(f"text: the operand %{operand} of a {op} is not defined")
            sent += _nbytes(shapes[operand])
        count, nbytes = totals.setdefault(op, [0, 0])
        totals[op] = [count + 1, nbytes + sent]
    return {op: (totals[op][0], totals[op][1]) for op in HLO_OPS if op in totals}
