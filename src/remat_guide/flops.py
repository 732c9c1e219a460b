"""True FLOPs of a compiled XLA program: while-loop bodies counted once per iteration."""

from __future__ import annotations

import dataclasses
import re

import jax

from remat_guide import _validation as validation
from remat_guide._jax_internals import CompiledText, hlo_flops

__all__ = ["FlopCount", "Loop", "count_flops"]

_HEADER = re.compile(r"^(?:ENTRY )?%([^\s(]+) \(")
_CALLED = re.compile(
    r"\b(?:calls|to_apply|body|condition|comparator|branch_computations|called_computations|"
    r"true_computation|false_computation|select|scatter)=(\{[^}]*\}|%[^\s,)}]+)"
)
_NAME = re.compile(r"%([^\s,)}]+)")
_WHILE_BODY = re.compile(r"\bbody=%([^\s,)}]+)")
_WHILE_CONDITION = re.compile(r"\bcondition=%([^\s,)}]+)")
# Metadata refers to stack frames of the whole module; a single computation has none of them.
_METADATA = re.compile(r',? metadata=\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\}')
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


@dataclasses.dataclass(frozen=True)
class Loop:
    """A while loop of a compiled program (``lax.scan``, ``fori_loop``, ...).

    Attributes:
        body: The name of the loop's body computation in the HLO text.
        trip_count: How many times the body runs, as XLA determined it.
        body_flops: The FLOPs of one iteration, loops nested in the body counted in full.

    Raises:
        TypeError: If a field has the wrong type.
        ValueError: If a count is negative.
    """

    body: str
    trip_count: int
    body_flops: int

    def __post_init__(self) -> None:
        validation.string(self.body, "Loop.body")
        for field in ("trip_count", "body_flops"):
            object.__setattr__(self, field,
                               validation.integer(getattr(self, field), f"Loop.{field}", minimum=0))


@dataclasses.dataclass(frozen=True)
class FlopCount:
    """FLOPs of a compiled program, as XLA reports them and in truth.

    Attributes:
        total: The FLOPs of one run of the program: each loop body times its trip count.
        reported: What ``compiled.cost_analysis()["flops"]`` reports, with each loop body
            counted once.
        loops: The while loops, outermost first within each computation.

    Raises:
        TypeError: If a field has the wrong type (``loops`` must hold :class:`Loop` values).
        ValueError: If a count is negative.
    """

    total: int
    reported: int
    loops: tuple[Loop, ...]

    def __post_init__(self) -> None:
        for field in ("total", "reported"):
            object.__setattr__(self, field,
                               validation.integer(getattr(self, field), f"FlopCount.{field}",
                                                  minimum=0))
        loops = tuple(validation.iterable(self.loops, "FlopCount.loops", what="Loop values"))
        for loop in loops:
            if not isinstance(loop, Loop):
                raise TypeError(f"FlopCount.loops must hold Loop values, got {type(loop).__name__}")
        object.__setattr__(self, "loops", loops)


class _Program:
    """The computations of one HLO module, with XLA's cost of each one on its own."""

    def __init__(self, text: str) -> None:
        self.order: list[str] = []
        self.lines: dict[str, list[str]] = {}
        self.entry: str | None = None
        self._costs: dict[str, float] = {}
        current: str | None = None
        for line in text.splitlines():
            header = _HEADER.match(line)
            if header and line.endswith("{"):
                current = header.group(1)
                self.order.append(current)
                self.lines[current] = [line.removeprefix("ENTRY ")]
                if line.startswith("ENTRY "):
                    self.entry = current
            elif current is not None:
                self.lines[current].append(line)
                if line == "}":
                    current = None

    def callees(self, name: str) -> list[str]:
        found = []
        for line in self.lines[name][1:]:
            for group in _CALLED.findall(line):
                found.extend(n for n in _NAME.findall(group) if n in self.lines)
        return found

    def closure(self, name: str) -> set[str]:
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(self.callees(current))
        return seen

    def xla_flops(self, name: str) -> float:
        """XLA's cost analysis of ``name`` as the entry of a module of its own."""
        if name in self._costs:
            return self._costs[name]
        needed = self.closure(name)
        parts = ["HloModule single_computation", ""]
        for other in self.order:
            if other in needed:
                text = _METADATA.sub("", "\n".join(self.lines[other]))
                parts.append(("ENTRY " + text) if other == name else text)
                parts.append("")
        self._costs[name] = hlo_flops("\n".join(parts))
        return self._costs[name]

    def loops_in(self, name: str) -> list[tuple[str, str, int]]:
        """The while loops run by ``name`` itself or by what it calls, outside other loops."""
        found, seen, todo = [], set(), [name]
        while todo:
            current = todo.pop(0)
            if current in seen:
                continue
            seen.add(current)
            inside_loops = set()
            for line in self.lines[current][1:]:
                if " while(" not in line:
                    continue
                body = _WHILE_BODY.search(line).group(1)
                condition = _WHILE_CONDITION.search(line).group(1)
                trips = _TRIP_COUNT.search(line)
                if trips is None:
                    raise ValueError(
                        f"the while loop with body %{body} has no known trip count, so its "
                        "FLOPs cannot be totalled (a lax.while_loop or a fori_loop with traced "
                        "bounds); lax.scan and fori_loop with static bounds have one"
                    )
                found.append((body, condition, int(trips.group(1))))
                inside_loops.update((body, condition))
            todo.extend(c for c in self.callees(current) if c not in inside_loops)
        return found

    def extra_flops(self, name: str, loops: list[Loop]) -> float:
        """FLOPs that XLA's count of ``name`` misses: the loop iterations after the first."""
        extra = 0.0
        for body, condition, trips in self.loops_in(name):
            inner = self.extra_flops(body, loops)
            body_once = self.xla_flops(body)
            loops.append(Loop(body, trips, round(body_once + inner)))
            # XLA counted the body (with its own loops once) and the condition once each;
            # the condition runs trips + 1 times.
            extra += (trips - 1) * body_once + trips * inner + trips * self.xla_flops(condition)
        return extra


def _reported_flops(compiled: jax.stages.Compiled) -> float:
    costs = compiled.cost_analysis()
    return float((costs or {}).get("flops", 0.0))


def count_flops(compiled: jax.stages.Compiled) -> FlopCount:
    """Counts the FLOPs of a compiled program, every loop iteration included.

    ``compiled.cost_analysis()`` walks the HLO once: the body of a while loop (which
    is what ``lax.scan`` and ``fori_loop`` compile to) is counted once, not once per
    iteration. This function reads the trip count XLA attached to each loop, has XLA
    cost each loop body on its own, and adds the missing iterations, for nested loops
    too. Loops whose trip count XLA does not know are refused.

    Args:
        compiled: A compiled program, from ``jax.jit(f).lower(*args).compile()``.

    Returns:
        The true total, XLA's own figure, and the loops that were multiplied.

    Raises:
        TypeError: If ``compiled`` is not a ``jax.stages.Compiled``.
        ValueError: If a loop has no trip count known at compile time, or XLA's 64-bit
            FLOP count overflowed (it reports a negative count).

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide import count_flops
        >>> def scanned(w, x):
        ...     return jax.lax.scan(lambda c, wi: (c @ wi, None), x, w)[0].sum()
        >>> w = jax.ShapeDtypeStruct((12, 64, 64), jnp.float32)
        >>> x = jax.ShapeDtypeStruct((8, 64), jnp.float32)
        >>> count = count_flops(jax.jit(scanned).lower(w, x).compile())
        >>> [(loop.trip_count, loop.body_flops >= 2 * 8 * 64 * 64) for loop in count.loops]
        [(12, True)]
        >>> count.total >= 12 * 2 * 8 * 64 * 64 > count.reported
        True
    """
    if not isinstance(compiled, (jax.stages.Compiled, CompiledText)):
        raise TypeError(
            "compiled must be a jax.stages.Compiled (jax.jit(f).lower(*args).compile()), "
            f"got {type(compiled).__name__}"
        )
    program = _Program(compiled.as_text())
    if program.entry is None:
        raise ValueError("compiled has no ENTRY computation in its HLO text")
    reported = _reported_flops(compiled)
    loops: list[Loop] = []
    extra = program.extra_flops(program.entry, loops)
    if reported < 0 or extra < 0 or any(cost < 0 for cost in program._costs.values()):
        raise ValueError(
            "compiled: XLA's FLOP count overflowed its 64-bit counter (it reports a negative "
            "count); the program is too large to count"
        )
    return FlopCount(round(reported + extra), round(reported), tuple(loops))

