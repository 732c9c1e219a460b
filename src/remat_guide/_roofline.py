"""The kernels of a compiled XLA GPU or TPU program, read from its text: matmul FLOPs, memory, host and link bytes."""

from __future__ import annotations

import collections
import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["Rates", "collective_link_bytes", "is_collective", "kernels", "matmul_flops_once", "replica_group",
           "step_seconds"]

_BYTES = {"pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1,
          "f8e4m3fnuz": 1, "f8e5m2fnuz": 1, "f8e3m4": 1, "f8e8m0fnu": 1, "f4e2m1fn": 1,
          "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "c64": 8,
          "s64": 8, "u64": 8, "f64": 8, "c128": 16, "token": 0}
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\](?:\{([^}]*)\})?")
_SPACE = re.compile(r"S\((\d+)\)")
_TILE = re.compile(r"T\(([\d,]+)\)")
_HEADER = re.compile(r"^(?:ENTRY )?%([\w.\-]+) ")
_NAME = re.compile(r"%([\w.\-]+)")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_CALLS = re.compile(r"\b(?:calls|to_apply|body)=%([\w.\-]+)")
_HOST_SPACE = "S(5)"
# Instructions that move no data of their own: views, tuples, markers, and the halves of
# asynchronous pairs whose other half carries the work.
_FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id",
         "replica-id", "opt-barrier", "copy-done", "fusion-done", "async-done", "send-done", "recv-done",
         "all-reduce-done", "all-gather-done", "collective-permute-done", "reduce-scatter-done", "all-to-all-done",
         "collective-broadcast-done", "ragged-all-to-all-done", "add-dependency", "domain"}
# Instructions that move bytes between devices, and how many times the bytes of one device's
# operands a ring moves over each device's link per device in the group, less one share
# (NVIDIA's nccl-tests, doc/PERFORMANCE.md, "bus bandwidth"): an all-gather sends its
# operand to the n - 1 others; a reduce-scatter or an all-to-all sends (n - 1) / n of it;
# an all-reduce is a reduce-scatter then an all-gather; a permute or broadcast sends it once.
_COLLECTIVES = {"all-gather", "all-reduce", "reduce-scatter", "all-to-all", "ragged-all-to-all",
                "collective-permute", "collective-broadcast"}
_PARTITIONS = re.compile(r"\bnum_partitions=(\d+)")
_REPLICAS = re.compile(r"\breplica_count=(\d+)")
_IOTA = re.compile(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_MESH = re.compile(r"mesh\[([^\]]*)\](?:, device_ids=\((.*?)\))? \{([^}]*)\}")
_SLICES = {"dynamic-slice", "slice"}
_GEMM = re.compile(r'custom_call_target="__cublas\$(?:gemm|lt\$matmul)')
# Operations that read each element of their operands at the position they write it:
# a value reaches a transpose through them with its memory order unchanged.
_ELEMENTWISE = {"abs", "add", "and", "atan2", "bitcast", "cbrt", "ceil", "clamp", "compare", "convert", "copy",
                "cosine", "divide", "erf", "exponential", "exponential-minus-one", "floor", "is-finite", "log",
                "log-plus-one", "logistic", "maximum", "minimum", "multiply", "negate", "not", "or", "power",
                "reduce-precision", "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt", "select",
                "sign", "sine", "sqrt", "subtract", "tan", "tanh", "xor"}
SECTOR_BYTES = 32
"""The bytes a GPU moves from memory for any read that touches them: one sector of a cache line.

NVIDIA's CUDA C++ Best Practices Guide ("Coalesced Access to Global Memory"): a warp's
loads are served in 32-byte sectors, so threads that each read one element from a
different sector move 32 bytes apiece. XLA's own performance model charges a whole 64-byte
DRAM-to-L2 transaction instead (``GetCoalescingWasteFactor`` in
``xla/service/gpu/model/gpu_performance_model_base.cc``).
"""
_MATMUL_KINDS = {"f8": "f8", "f16": "bf16", "bf16": "bf16", "f32": "f32", "f64": "f64", "s8": "int8",
                 "u8": "int8"}


@dataclasses.dataclass(frozen=True)
class _Array:
    dtype: str
    dims: tuple[int, ...]
    host: bool
    on_chip: bool = False
    stored: int = 0
    order: tuple[int, ...] = ()  # its layout's dimensions, minor to major; empty where the text gives none

    @property
    def nbytes(self) -> int:
        """The bytes it takes in device or host memory: none in a TPU core's own memories (VMEM, SMEM)."""
        if self.on_chip:
            return 0
        return self.stored or self.logical_bytes

    @property
    def logical_bytes(self) -> int:
        """The bytes of its elements, wherever it lives and however it is laid out."""
        return math.prod(self.dims) * _BYTES.get(self.dtype, 4)


@dataclasses.dataclass
class _Instruction:
    name: str
    arrays: list[_Array]
    opcode: str
    operands: list[str]
    attributes: str
    literal: str = ""

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    @property
    def on_host(self) -> bool:
        """Whether its (first) array lives in host memory, ``S(5)``."""
        return bool(self.arrays) and self.arrays[0].host


def _closing(text: str, start: int) -> int:
    """The index just past the bracket that closes the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _tiled_bytes(dtype: str, dims: tuple[int, ...], layout: str) -> int:
    """The bytes of a TPU array in its tiled layout: its minor dimensions padded to whole tiles.

    ``{1,0:T(8,128)(2,1)}`` lists the dimensions minor to major, then the tile of the
    most minor ones (8 x 128 elements; a second tile, such as bfloat16's ``(2,1)``, splits
    the first and pads nothing more).
    """
    size = _BYTES.get(dtype, 4)
    order, _, tiling = layout.partition(":")
    tile = _TILE.search(tiling)
    minor_to_major = [int(d) for d in order.split(",") if d.strip().isdigit()]
    if tile is None or sorted(minor_to_major) != list(range(len(dims))):
        return math.prod(dims) * size
    physical = [dims[d] for d in reversed(minor_to_major)]
    sizes = [int(t) for t in tile.group(1).split(",")]
    for position, step in zip(range(len(physical) - 1, -1, -1), reversed(sizes)):
        physical[position] = -(-physical[position] // step) * step
    return math.prod(physical) * size


def _arrays(shape: str, tpu: bool = False) -> list[_Array]:
    """The arrays of a shape. On a TPU, an array in a memory space other than HBM and the host's is on the chip."""
    arrays = []
    for dtype, dims, layout in _ARRAY.findall(shape):
        if dtype not in _BYTES:
            continue
        sizes = tuple(int(d) for d in dims.split(",") if d)
        space = _SPACE.search(layout or "")
        host = _HOST_SPACE in (layout or "")
        if not tpu:
            order = tuple(int(d) for d in (layout or "").partition(":")[0].split(",") if d.strip().isdigit())
            arrays.append(_Array(dtype, sizes, host, order=order))
            continue
        arrays.append(_Array(dtype, sizes, host, on_chip=space is not None and not host,
                             stored=_tiled_bytes(dtype, sizes, layout or "")))
    return arrays


def _instruction(line: str, tpu: bool = False) -> _Instruction | None:
    body = line.strip()
    if body.startswith("ROOT "):
        body = body[5:]
    if not body.startswith("%") or " = " not in body:
        return None
    name, rest = body[1:].split(" = ", 1)
    end = _closing(rest, 0) if rest.startswith("(") else rest.index(" ")
    shape, rest = rest[:end], rest[end:].lstrip()
    paren = rest.find("(")
    if paren < 0:
        return None
    opcode = rest[:paren]
    close = _closing(rest, paren)
    literal = rest[paren + 1:close - 1] if opcode in ("constant", "parameter") else ""
    return _Instruction(name, _arrays(shape, tpu), opcode, _NAME.findall(rest[paren:close]), rest[close:], literal)


def _computations(text: str, tpu: bool = False) -> tuple[dict[str, list[_Instruction]], str]:
    computations: dict[str, list[_Instruction]] = {}
    entry, current = "", None
    for line in text.splitlines():
        if current is None:
            match = _HEADER.match(line)
            if match and line.rstrip().endswith("{"):
                current = computations.setdefault(match.group(1), [])
                if line.startswith("ENTRY"):
                    entry = match.group(1)
        elif line.rstrip() == "}":  # an instruction's attributes may run on to lines of their own
            current = None
        else:
            parsed = _instruction(line, tpu)
            if parsed is not None:
                current.append(parsed)
    return computations, entry


def _transpose_run(transpose: _Instruction, by_name: Mapping[str, _Instruction]) -> int | None:
    """How many consecutive elements of a transpose's operand consecutive elements of its result read.

    ``None`` where the text gives no layout or the operand is not in the computation.
    """
    operand = by_name.get(transpose.operands[0]) if transpose.operands else None
    permutation = _dims(transpose.attributes, "dimensions")
    if operand is None or not operand.arrays or not transpose.arrays or not permutation:
        return None
    source, result = operand.arrays[0], transpose.arrays[0]
    if len(source.order) != len(source.dims) or len(result.order) != len(result.dims):
        return None
    wanted = [d for d in source.order if source.dims[d] > 1]
    walked = [permutation[d] for d in result.order if result.dims[d] > 1]
    run = 1
    for read, expected in zip(walked, wanted):
        if read != expected:
            break
        run *= source.dims[read]
    return run


def _dims(attributes: str, key: str) -> tuple[int, ...]:
    match = re.search(key + r"=\{([\d,]*)\}", attributes)
    return tuple(int(d) for d in match.group(1).split(",") if d) if match else ()


def _is_gemm(instruction: _Instruction) -> bool:
    """Whether an instruction is a cuBLAS matmul: what XLA makes of a dot when it autotunes on a GPU."""
    return instruction.opcode == "custom-call" and _GEMM.search(instruction.attributes) is not None


def _dot_dims(dot: _Instruction, key: str) -> tuple[int, ...]:
    """One of a dot's dimension lists (``lhs_contracting`` ...), from a dot or from a cuBLAS call's backend config."""
    if dot.opcode == "dot":
        return _dims(dot.attributes, f"{key}_dims")
    match = re.search(rf'"{key}_dimensions":\[([^\]]*)\]', dot.attributes)
    return tuple(int(d.strip('" ')) for d in match.group(1).split(",") if d.strip('" ')) if match else ()


def _dot_flops(dot: _Instruction, by_name: Mapping[str, _Instruction]) -> dict[str, int]:
    """A dot's FLOPs (or a cuBLAS matmul's), 2 per multiply-add, under the dtype class of its left operand."""
    lhs = by_name.get(dot.operands[0]) if dot.operands else None
    if lhs is None or not lhs.arrays or not dot.arrays:
        return {}
    operand = lhs.arrays[0]
    contracted = math.prod(operand.dims[d] for d in _dot_dims(dot, "lhs_contracting"))
    return {_matmul_kind(operand.dtype): 2 * math.prod(dot.arrays[0].dims) * contracted}


def _matmul_kind(dtype: str) -> str:
    """The dtype class a matmul's FLOPs count under, from its left operand's dtype."""
    return _MATMUL_KINDS.get("f8" if dtype.startswith("f8") else dtype, "f32")


_Shape = tuple[int, int, int, int, str]  # a dot's batch, rows, columns, contracted size and dtype class


def _dot_shape(dot: _Instruction, by_name: Mapping[str, _Instruction]) -> _Shape | None:
    """A dot's batch, rows, columns and contracted size, with its left operand's dtype class: ``(b, m, n, k, kind)``."""
    lhs, rhs = (by_name.get(name) for name in (dot.operands + ["", ""])[:2])
    if lhs is None or rhs is None or not lhs.arrays or not rhs.arrays:
        return None
    left, right = lhs.arrays[0].dims, rhs.arrays[0].dims
    batch, contracted = _dot_dims(dot, "lhs_batch"), _dot_dims(dot, "lhs_contracting")
    skipped = set(_dot_dims(dot, "rhs_batch")) | set(_dot_dims(dot, "rhs_contracting"))
    rows = math.prod(size for d, size in enumerate(left) if d not in batch and d not in contracted)
    columns = math.prod(size for d, size in enumerate(right) if d not in skipped)
    return (math.prod(left[d] for d in batch), rows, columns, math.prod(left[d] for d in contracted),
            _matmul_kind(lhs.arrays[0].dtype))


def _taps(out: int, window: int, stride: int, low: int, size: int, dilation: int, window_dilation: int) -> int:
    """How many (output position, window tap) pairs of one spatial dimension land on an input element.

    Padding and the holes that ``lhs_dilate`` puts between input elements contribute nothing,
    as XLA's own cost analysis counts them.
    """
    last = (size - 1) * dilation
    count = 0
    for tap in range(window):
        offset = tap * window_dilation - low
        first = max(0, -(offset // stride))  # the least p with p * stride + offset >= 0
        final = min(out - 1, (last - offset) // stride) if last >= offset else -1
        if final < first:
            continue
        if dilation == 1:
            count += final - first + 1
        else:
            count += sum(1 for p in range(first, final + 1) if (p * stride + offset) % dilation == 0)
    return count


def _window(attributes: str) -> dict[str, list[int]]:
    """A convolution's window attributes, each a list over its spatial dimensions."""
    match = re.search(r"window=\{([^}]*)\}", attributes)
    fields: dict[str, list[int]] = {}
    for part in (match.group(1).split() if match else []):
        key, _, value = part.partition("=")
        if key == "pad":
            fields["pad"] = [int(pair.split("_")[0]) for pair in value.split("x")]
        elif key != "rhs_reversal":
            fields[key] = [int(v) for v in value.split("x")]
    return fields


def _conv_flops(conv: _Instruction, by_name: Mapping[str, _Instruction]) -> dict[str, int]:
    """A convolution's FLOPs, 2 per multiply-add: how XLA's TPU compiler writes a ``dot_general``.

    Every output element multiplies the kernel's input features by the window taps that land
    on the input; batch dimensions that the compiler turned into windows count only the taps
    that hit data.
    """
    labels = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", conv.attributes)
    lhs = by_name.get(conv.operands[0]) if conv.operands else None
    rhs = by_name.get(conv.operands[1]) if len(conv.operands) > 1 else None
    if labels is None or lhs is None or rhs is None or not lhs.arrays or not rhs.arrays or not conv.arrays:
        return {}
    lhs_labels, rhs_labels, out_labels = labels.groups()
    lhs_dims, rhs_dims, out_dims = lhs.arrays[0].dims, rhs.arrays[0].dims, conv.arrays[0].dims
    if len(lhs_labels) != len(lhs_dims) or len(rhs_labels) != len(rhs_dims) or len(out_labels) != len(out_dims):
        return {}
    window = _window(conv.attributes)
    spatial = sorted(label for label in out_labels if label.isdigit())

    def field(key: str, index: int) -> int:
        return window.get(key, [0 if key == "pad" else 1] * len(spatial))[index]

    pairs = 1
    for index, label in enumerate(spatial):
        pairs *= _taps(out_dims[out_labels.index(label)], rhs_dims[rhs_labels.index(label)], field("stride", index),
                       field("pad", index), lhs_dims[lhs_labels.index(label)], field("lhs_dilate", index),
                       field("rhs_dilate", index))
    per_position = out_dims[out_labels.index("b")] * out_dims[out_labels.index("f")]
    operand = lhs.arrays[0]
    kind = _MATMUL_KINDS.get("f8" if operand.dtype.startswith("f8") else operand.dtype, "f32")
    return {kind: 2 * per_position * rhs_dims[rhs_labels.index("i")] * pairs}


# Pallas's Triton flash attention (jax.experimental.pallas.ops.gpu.attention): the matrix
# products of size (seq x seq x head_dim) each of its kernels computes per head, the forward
# q k^T and p v, the backward seven (four for dk and dv, three more for dq). It reaches XLA as a
# custom call whose FLOPs XLA does not know; each is counted causal, half of them done.
_ATTENTION_PRODUCTS = {"mha_forward": 2, "mha_backward": 7}
_KERNEL_NAME = re.compile(r'name = "(\w+)"')


# Pallas's splash attention (jax.experimental.pallas.ops.tpu.splash_attention), as XLA's TPU
# compiler keeps it: a tpu_custom_call without the kernel's name, whose operands are two block
# masks, then the query (batch, heads, seq, head_dim), the keys and the values (batch, kv_heads,
# seq, head_dim). The forward kernel computes q k^T and p v; the backward's dq kernel three
# products, its dk-and-dv kernel four, and only the backward kernels take the output's gradient
# too (more operands). Each is counted causal, half of them done.
_SPLASH_FORWARD_OPERANDS = 6


def _splash_flops(call: _Instruction, by_name: Mapping[str, _Instruction]) -> dict[str, int]:
    """The FLOPs of one of Pallas's splash attention kernels on a TPU, from its query and keys."""
    arrays = [by_name[o].arrays[0] if o in by_name and by_name[o].arrays else None for o in call.operands]
    if len(arrays) < _SPLASH_FORWARD_OPERANDS or any(a is None or len(a.dims) not in (3, 4) for a in arrays[2:5]):
        return {}
    # With a batch of one, XLA drops the batch dimension: (heads, seq, head_dim).
    query, keys, values = ((1, *a.dims) if len(a.dims) == 3 else a.dims for a in arrays[2:5])
    batch, heads, seq, dim = query
    if keys[0] != batch or keys[3] != dim or values != keys:
        return {}
    if len(arrays) == _SPLASH_FORWARD_OPERANDS:
        products = 2
    else:
        products = 4 if len(call.arrays) == 2 and all(a.dims == arrays[3].dims for a in call.arrays) else 3
    kind = _MATMUL_KINDS.get(arrays[2].dtype, "f32")
    return {kind: products * 2 * batch * heads * seq * keys[2] * dim // 2}


def _attention_flops(call: _Instruction, by_name: Mapping[str, _Instruction]) -> dict[str, int]:
    """The FLOPs of one of Pallas's attention kernels: Triton's, from its query ``(batch, seq, heads,
    head_dim)``, or splash's on a TPU."""
    if 'custom_call_target="tpu_custom_call"' in call.attributes:
        return _splash_flops(call, by_name)
    named = _KERNEL_NAME.search(call.attributes)
    products = _ATTENTION_PRODUCTS.get(named.group(1)) if named else None
    query = by_name.get(call.operands[0]) if call.operands else None
    if products is None or query is None or not query.arrays or len(query.arrays[0].dims) != 4:
        return {}
    batch, seq, heads, dim = query.arrays[0].dims
    kind = _MATMUL_KINDS.get(query.arrays[0].dtype, "f32")
    return {kind: products * 2 * batch * heads * seq * seq * dim // 2}


def _iota(groups: str, dims: str, order: str | None) -> list[list[int]]:
    """The groups of XLA's iota form ``[groups,size]<=[dims]T(order)``: ``0..n-1`` laid out as ``dims``,
    its axes put in ``order``, read row by row."""
    import numpy as np

    shape = [int(d) for d in dims.split(",")]
    ids = np.arange(math.prod(shape)).reshape(shape)
    if order:
        ids = ids.transpose([int(d) for d in order.split(",")])
    return ids.reshape(int(groups.split(",")[0]), -1).tolist()


def _mesh_group(axes: str, device_ids: str | None, grouped: str) -> list[int]:
    """The first group of XLA's mesh form ``mesh['x'=2,'y'=4] {'y'}``: the devices along the grouped axes,
    every other axis at its first index. A sub-axis ``'y':(pre)size`` is ``size`` of the axis's
    elements, ``pre`` apart."""
    import numpy as np

    names, sizes = [], []
    for axis in axes.split(","):
        name, _, size = axis.rpartition("=")
        names.append(name.strip().strip("'\""))
        sizes.append(int(size))
    if device_ids and (iota := _IOTA.fullmatch(device_ids.strip())):
        ids = np.array(_iota(*iota.groups())).reshape(sizes)
    elif device_ids:
        ids = np.array([int(d) for d in re.findall(r"\d+", device_ids)]).reshape(sizes)
    else:
        ids = np.arange(math.prod(sizes)).reshape(sizes)
    split: list[int] = []
    keep: list[slice | int] = []
    for name, size in zip(names, sizes):
        parts = [g for g in grouped.split(",") if g.strip().split(":")[0].strip("'\" ") == name]
        sub = re.search(r":\((\d+)\)(\d+)", parts[0]) if parts else None
        if sub is None:
            split.append(size)
            keep.append(slice(None) if parts else 0)
        else:
            pre, length = int(sub.group(1)), int(sub.group(2))
            split.extend([size // (pre * length), length, pre])
            keep.extend([0, slice(None), 0])
    return ids.reshape(split)[tuple(keep)].ravel().tolist()


def replica_group(attributes: str, devices: int) -> list[list[int]]:
    """The devices a collective's bytes travel between, from its attributes: its first replica group, or
    each pair of a permute that moves anything (``source_target_pairs``); ids as the program numbers
    its devices. Every device when the attributes name no group.

    Examples:
        >>> replica_group("replica_groups={{0,2},{1,3}}, dimensions={0}", 4)
        [[0, 2]]
        >>> replica_group("replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}", 8)
        [[0, 2, 4, 6]]
        >>> replica_group("replica_groups=mesh['fsdp'=2,'tensor'=4] {'fsdp'}, dimensions={0}", 8)
        [[0, 4]]
        >>> replica_group("source_target_pairs={{0,1},{1,0},{2,2}}", 4)
        [[0, 1], [1, 0]]
    """
    pairs = re.search(r"source_target_pairs=\{(\{[\d,{}]*\})\}", attributes)
    if pairs:
        found = [[int(a), int(b)] for a, b in re.findall(r"\{(\d+),(\d+)\}", pairs.group(1))]
        return [pair for pair in found if pair[0] != pair[1]]
    if mesh := _MESH.search(attributes):
        return [_mesh_group(*mesh.groups())]
    groups = re.search(r"replica_groups=(\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?|\{[\d,{}]*\})", attributes)
    if groups and (iota := _IOTA.fullmatch(groups.group(1))):
        return [_iota(*iota.groups())[0]]
    if groups and (first := re.search(r"\{(\d[\d,]*)\}", groups.group(1))):
        return [[int(d) for d in first.group(1).split(",")]]
    return [list(range(devices))]


def collective_link_bytes(opcode: str, nbytes: int, groups: Sequence[Sequence[int]]) -> int:
    """What a collective sends from each device over its link, as a ring does: ``nbytes`` of its operands
    on each device, among the devices of ``groups`` (see :func:`replica_group`).

    Examples:
        >>> collective_link_bytes("all-gather", 100, [[0, 1, 2, 3]])  # to each of the other three
        300
        >>> collective_link_bytes("reduce-scatter", 100, [[0, 1, 2, 3]]), collective_link_bytes("all-reduce", 100,
        ...                                                                                     [[0, 1, 2, 3]])
        (75, 150)
        >>> collective_link_bytes("collective-permute", 100, [[0, 1]]), collective_link_bytes("all-reduce", 100, [[0]])
        (100, 0)
    """
    base = opcode.removesuffix("-start")
    if base in ("collective-permute", "collective-broadcast"):
        return nbytes if groups else 0
    n = len(groups[0]) if groups else 1
    if n <= 1:
        return 0
    if base == "all-gather":
        return nbytes * (n - 1)
    share = nbytes * (n - 1) // n
    return 2 * share if base == "all-reduce" else share


def is_collective(opcode: str) -> bool:
    """Whether an instruction moves bytes between devices: a collective, or the start of an asynchronous one.

    Examples:
        >>> is_collective("all-gather-start"), is_collective("reduce-scatter"), is_collective("fusion-start")
        (True, True, False)
    """
    return opcode.removesuffix("-start") in _COLLECTIVES


def _merged(found: Mapping[tuple[Any, ...], int], shapes: bool) -> list[list[Any]]:
    """Kernels counted by their figures, as ``[count, {dtype: flops}, device_bytes]`` in a stable order;
    with ``shapes`` (a GPU program), each also with its dots' shapes, ``[[b, m, n, k, kind], ...]``,
    and the bytes its strided reads move beyond what they read (:meth:`_Program.strided_bytes`)."""
    ordered = sorted(found.items(), key=lambda item: (item[0][1], item[0][0], item[0][2], item[0][3], item[1]))
    return [[count, dict(flops), device, *([[list(dot) for dot in dots], strided] if shapes else [])]
            for (flops, device, dots, strided), count in ordered]


class _Program:
    """One compiled program's computations, walked from its entry."""

    def __init__(self, text: str, tpu: bool = False) -> None:
        self.computations, self.entry = _computations(text, tpu)
        self.by_name = {name: {i.name: i for i in body} for name, body in self.computations.items()}
        self.found: collections.Counter = collections.Counter()
        self.host_out = 0
        self.host_in = 0
        self.schedules: dict[str, list[list[Any]] | None] = {}
        self.uses: dict[str, dict[str, list[tuple[_Instruction, int]]]] = {}
        self.tpu = tpu
        self.once = False
        self.unknown: set[str] = set()  # loops whose trip count could not be read: counted once
        header = text[:text.find("\n")] if "\n" in text else text
        partitions, replicas = _PARTITIONS.search(header), _REPLICAS.search(header)
        self.devices = (int(partitions.group(1)) if partitions else 1) * (int(replicas.group(1)) if replicas else 1)
        self.collectives: collections.Counter = collections.Counter()

    def matmul_flops(self, computation: str, seen: frozenset = frozenset()) -> dict[str, int]:
        """The FLOPs of the dots in a fused computation and the computations it calls."""
        flops: collections.Counter = collections.Counter()
        by_name = self.by_name.get(computation, {})
        for instruction in self.computations.get(computation, []):
            if instruction.opcode == "dot":
                flops.update(_dot_flops(instruction, by_name))
            elif instruction.opcode == "convolution":
                flops.update(_conv_flops(instruction, by_name))
            for called in _CALLS.findall(instruction.attributes):
                if called not in seen:
                    flops.update(self.matmul_flops(called, seen | {computation}))
        return dict(flops)

    def dot_shapes(self, instruction: _Instruction, computation: str) -> tuple[_Shape, ...]:
        """The shapes of the dots a GPU kernel runs (see :func:`_dot_shape`); none on a TPU, whose figures keep none."""
        if self.tpu:
            return ()
        if instruction.opcode == "dot" or _is_gemm(instruction):
            found = [_dot_shape(instruction, self.by_name.get(computation, {}))]
        else:
            called = _CALLS.findall(instruction.attributes)
            found = self.fused_dots(called[0]) if called and instruction.opcode in (
                "fusion", "fusion-start", "async-start") else []
        return tuple(shape for shape in found if shape is not None)

    def fused_dots(self, computation: str, seen: frozenset = frozenset()) -> list[_Shape | None]:
        """The shapes of the dots in a fused computation and the computations it calls."""
        found: list[_Shape | None] = []
        by_name = self.by_name.get(computation, {})
        for instruction in self.computations.get(computation, []):
            if instruction.opcode == "dot":
                found.append(_dot_shape(instruction, by_name))
            for called in _CALLS.findall(instruction.attributes):
                if called not in seen:
                    found.extend(self.fused_dots(called, seen | {computation}))
        return found

    def fused_bytes(self, instruction: _Instruction, computation: str) -> tuple[int, int, int]:
        """HBM, host-out and host-in bytes of a fusion: what its kernel reads and writes.

        A parameter that the fusion only slices is read as its slices; the buffer that a
        dynamic-update-slice updates in place is neither read nor rewritten, only the update.
        """
        body = self.computations.get(computation, [])
        if not body:
            return instruction.nbytes, 0, 0
        by_name = self.by_name[computation]
        users = self.users(computation)
        device, host_out, host_in = 0, 0, 0
        for parameter in (i for i in body if i.opcode == "parameter"):
            uses = users.get(parameter.name, [])
            if self.tpu:
                read = self.read_bytes(computation, parameter.name, parameter.nbytes)
            elif uses and all(user.opcode in _SLICES and position == 0 for user, position in uses):
                read = sum(user.nbytes for user, _ in uses)
            elif uses and all(user.opcode == "dynamic-update-slice" and position == 0 for user, position in uses):
                read = 0
            else:
                read = parameter.nbytes
            if parameter.on_host:
                host_in += read
            else:
                device += read
        root = body[-1]
        for node in [by_name.get(o) for o in root.operands] if root.opcode == "tuple" else [root]:
            if node is None:
                continue
            written = node.nbytes
            if node.opcode == "dynamic-update-slice" and len(node.operands) > 1 and node.operands[1] in by_name:
                written = by_name[node.operands[1]].nbytes
            if node.on_host:
                host_out += written
            else:
                device += written
        return device, host_out, host_in

    def key(self, instruction: _Instruction, computation: str, flops: Mapping[str, int],
            device: int) -> tuple[Any, ...]:
        """What a kernel is counted by: its FLOPs, bytes, dots' shapes and strided reads' extra bytes."""
        strided = self.strided_bytes(instruction) if instruction.opcode == "fusion" else 0
        return tuple(sorted(flops.items())), device, self.dot_shapes(instruction, computation), strided

    def strided_bytes(self, instruction: _Instruction) -> int:
        """The bytes a GPU loop fusion moves beyond what it reads, for operands it reads across a transpose.

        XLA's loop emitter gives consecutive threads consecutive elements of the result. A
        parameter that reaches the result through a transpose of its minor dimension is then
        read a short run of elements at a time, each run in a sector of its own
        (:data:`SECTOR_BYTES`); the transpose emitter (``kind=kInput``) stages its tiles
        through shared memory instead and reads whole sectors. Nothing on a TPU.
        """
        called = _CALLS.findall(instruction.attributes)
        if self.tpu or "kind=kLoop" not in instruction.attributes or not called:
            return 0
        body = self.computations.get(called[0], [])
        by_name = self.by_name.get(called[0], {})
        runs: dict[str, int] = {}
        seen: set[tuple[str, int]] = set()
        for transpose in (i for i in body if i.opcode == "transpose"):
            run = _transpose_run(transpose, by_name)
            if run is not None:
                self._reaching(transpose.operands[0] if transpose.operands else "", run, by_name, runs, seen)
        wasted = 0
        for name, run in runs.items():
            array = by_name[name].arrays[0]
            size = _BYTES.get(array.dtype, 4)
            if run * size < SECTOR_BYTES:
                elements = math.prod(array.dims)
                wasted += -(-elements // run) * SECTOR_BYTES - elements * size
        return wasted

    @staticmethod
    def _reaching(name: str, run: int, by_name: Mapping[str, _Instruction], runs: dict[str, int],
                  seen: set[tuple[str, int]]) -> None:
        """Records in ``runs`` each parameter whose elements reach ``name`` in order, with the run it is read in."""
        node = by_name.get(name)
        if node is None or not node.arrays or (name, run) in seen:
            return
        seen.add((name, run))
        if node.opcode == "parameter":
            runs[name] = min(run, runs.get(name, run))
            return
        if node.opcode == "concatenate":  # each operand is contiguous only within its own part
            axis = _dims(node.attributes, "dimensions")
            for operand in node.operands:
                part = by_name.get(operand)
                if part is None or not part.arrays or not axis:
                    continue
                array = part.arrays[0]
                order = array.order or tuple(range(len(array.dims) - 1, -1, -1))
                if axis[0] in order:
                    inner = math.prod(array.dims[d] for d in order[:order.index(axis[0]) + 1])
                    _Program._reaching(operand, min(run, inner), by_name, runs, seen)
            return
        if node.opcode not in _ELEMENTWISE:
            return
        elements = math.prod(node.arrays[0].dims)
        for operand in node.operands:
            source = by_name.get(operand)
            if source is not None and source.arrays and math.prod(source.arrays[0].dims) == elements:
                _Program._reaching(operand, run, by_name, runs, seen)

    def users(self, computation: str) -> dict[str, list[tuple[_Instruction, int]]]:
        """Each value of a computation with the instructions that use it and at which operand position."""
        if computation not in self.uses:
            found: dict[str, list[tuple[_Instruction, int]]] = collections.defaultdict(list)
            for inner in self.computations.get(computation, []):
                for position, operand in enumerate(inner.operands):
                    found[operand].append((inner, position))
            self.uses[computation] = found
        return self.uses[computation]

    def read_bytes(self, computation: str, name: str, whole: int) -> int:
        """What a TPU fusion reads of a value of ``whole`` bytes: its slices where it is only sliced.

        A TPU fusion nests fusions and bitcasts its parameters; the value is followed into
        them. The buffer that a dynamic-update-slice updates in place is not read.
        """
        uses = self.users(computation).get(name, [])
        if not uses:
            return whole
        read = 0
        for user, position in uses:
            called = _CALLS.findall(user.attributes)
            if user.opcode in _SLICES and position == 0:
                read += user.nbytes
            elif user.opcode == "dynamic-update-slice" and position == 0:
                continue
            elif user.opcode == "bitcast":
                read += self.read_bytes(computation, user.name, whole)
            elif user.opcode == "fusion" and called:
                inner = [i for i in self.computations.get(called[0], [])
                         if i.opcode == "parameter" and i.literal == str(position)]
                read += self.read_bytes(called[0], inner[0].name, whole) if inner else whole
            else:
                return whole
        return min(read, whole)

    def plain_bytes(self, instruction: _Instruction, by_name: Mapping[str, _Instruction]) -> tuple[int, int, int]:
        """HBM, host-out and host-in bytes of an instruction that is its own kernel."""
        operands = [by_name[o] for o in instruction.operands if o in by_name]
        device, host_out, host_in = 0, 0, 0
        if instruction.opcode in _SLICES and operands:
            reads = [(operands[0], instruction.nbytes)]
        elif instruction.opcode == "dynamic-update-slice" and len(operands) > 1:
            reads = [(operands[1], operands[1].nbytes)]
        else:
            reads = [(operand, operand.nbytes) for operand in operands]
        for operand, size in reads:
            if operand.on_host:
                host_in += size
            else:
                device += size
        written = (operands[1].nbytes if instruction.opcode == "dynamic-update-slice" and len(operands) > 1
                   else instruction.nbytes)
        if instruction.on_host:
            host_out += written
        else:
            device += written
        return device, host_out, host_in

    def cost(self, instruction: _Instruction, computation: str) -> tuple[dict[str, int], int, int, int] | None:
        """A kernel's matmul FLOPs and its HBM, host-out and host-in bytes; ``None`` for what launches nothing.

        Loops, calls and conditionals are ``None`` too: their computations hold the kernels.
        """
        opcode = instruction.opcode
        if opcode in _FREE or (self.tpu and opcode.endswith("-done")) or opcode in ("while", "call", "conditional") or (
                opcode == "custom-call" and "AllocateBuffer" in instruction.attributes):
            return None
        by_name = self.by_name.get(computation, {})
        if opcode in ("dynamic-slice-start", "dynamic-update-slice-start"):
            return ({}, *self.slice_bytes(instruction, by_name))
        called = _CALLS.findall(instruction.attributes)
        if called and opcode in ("fusion", "fusion-start", "async-start"):
            return (self.matmul_flops(called[0]), *self.fused_bytes(instruction, called[0]))
        if opcode == "copy-start" and instruction.arrays:
            return ({}, *self.copy_bytes(instruction, by_name))
        if _is_gemm(instruction):  # its result, without the scratch workspace cuBLAS is given
            device, host_out, host_in = self.plain_bytes(instruction, by_name)
            scratch = sum(a.nbytes for a in instruction.arrays[1:] if a.dtype == "s8")
            return _dot_flops(instruction, by_name), device - scratch, host_out, host_in
        flops = (_dot_flops(instruction, by_name) if opcode == "dot" else
                 _conv_flops(instruction, by_name) if opcode == "convolution" else
                 _attention_flops(instruction, by_name) if opcode == "custom-call" and not self.once else {})
        return (flops, *self.plain_bytes(instruction, by_name))

    def constant(self, name: str, computation: str) -> int | None:
        """The integer an instruction holds, through copies; ``None`` if it is not a constant."""
        by_name = self.by_name.get(computation, {})
        instruction = by_name.get(name)
        while instruction is not None and instruction.opcode == "copy" and instruction.operands:
            instruction = by_name.get(instruction.operands[0])
        if instruction is None or instruction.opcode != "constant":
            return None
        try:
            return int(instruction.literal)
        except ValueError:
            return None

    def trips(self, loop: _Instruction, computation: str) -> int:
        """How many times a loop runs its body: XLA's ``known_trip_count``, else read from its condition.

        A TPU program's loops carry no trip count (:meth:`condition_trips`); one whose
        condition says nothing readable runs once, and is listed in ``self.unknown``.
        """
        if self.once:
            return 1
        known = _TRIPS.search(loop.attributes)
        if known:
            return int(known.group(1))
        if not self.tpu:  # a GPU program's loops without a known trip count count once, as they always have
            return 1
        trips = self.condition_trips(loop, computation)
        if trips is None:
            self.unknown.add(loop.name)
            return 1
        return trips

    def condition_trips(self, loop: _Instruction, computation: str) -> int | None:
        """A loop's trip count read from its condition; ``None`` where the condition is not of that form.

        The condition compares a counter in the loop's state with a constant, the counter
        starts at a constant the loop is given, and the body adds a constant step to it.
        """
        condition = re.search(r"condition=%([\w.\-]+)", loop.attributes)
        body = self.computations.get(condition.group(1), []) if condition else []
        by_name = self.by_name.get(condition.group(1), {}) if condition else {}
        root = body[-1] if body else None
        direction = re.search(r"direction=(\w+)", root.attributes) if root and root.opcode == "compare" else None
        if root is None or direction is None or len(root.operands) != 2:
            return None
        left, right = (by_name.get(name) for name in root.operands)
        kind = direction.group(1)
        if left is not None and left.opcode == "constant":
            left, right, kind = right, left, {"GT": "LT", "GE": "LE"}.get(kind, "")
        if left is None or right is None or left.opcode != "get-tuple-element" or kind not in ("LT", "LE"):
            return None
        bound = self.constant(right.name, condition.group(1))
        index = re.search(r"index=(\d+)", left.attributes)
        if bound is None or index is None:
            return None
        counter = int(index.group(1))
        state = self.by_name.get(computation, {}).get(loop.operands[0]) if loop.operands else None
        start = 0
        if state is not None and state.opcode == "tuple" and counter < len(state.operands):
            start = self.constant(state.operands[counter], computation) or 0
        step = self.step(_CALLS.findall(loop.attributes)[0], counter)
        return max(1, -(-(bound - start + (kind == "LE")) // step))

    def step(self, body: str, index: int) -> int:
        """How much a loop's body adds to the counter at ``index`` of its state: 1 unless it adds a constant."""
        instructions = self.computations.get(body, [])
        by_name = self.by_name.get(body, {})
        root = instructions[-1] if instructions else None
        update = by_name.get(root.operands[index]) if root and root.opcode == "tuple" and index < len(
            root.operands) else None
        if update is None or update.opcode != "add":
            return 1
        steps = [self.constant(name, body) for name in update.operands]
        return next((value for value in steps if value is not None and value > 0), 1)

    def called(self, instruction: _Instruction, seen: frozenset, computation: str = "") -> list[tuple[str, int]]:
        """The computations a loop, call or conditional runs, each with how many times it runs them."""
        if instruction.opcode == "while":  # _CALLS finds its body, not its condition
            body = _CALLS.findall(instruction.attributes)
            return ([(body[0], self.trips(instruction, computation))] if body and body[0] not in seen else [])
        if instruction.opcode in ("call", "conditional"):
            names = _CALLS.findall(instruction.attributes) or re.findall(r"%([\w.\-]+)", instruction.attributes)
            return [(name, 1) for name in names if name in self.computations and name not in seen]
        return []

    def walk(self, computation: str, times: int, seen: frozenset = frozenset(),
             into: collections.Counter | None = None, named: bool = False) -> None:
        """Counts the kernels of ``computation`` run ``times`` times, in ``into`` (``self.found`` by default);
        with ``named``, each kernel apart, its key led by its instruction's name."""
        found = self.found if into is None else into
        for instruction in self.computations.get(computation, []):
            for name, trips in self.called(instruction, seen, computation):
                self.walk(name, times * trips, seen | {computation}, found, named)
            link = self.link(instruction, computation)
            if link is not None:
                self.collectives[link] += times
                if instruction.opcode != "fusion":
                    continue
            cost = self.cost(instruction, computation)
            if cost is None:
                continue
            flops, device, host_out, host_in = cost
            self.host_out += times * host_out
            self.host_in += times * host_in
            key = self.key(instruction, computation, flops, device)
            found[(instruction.name, *key) if named else key] += times

    def link(self, instruction: _Instruction, computation: str) -> tuple[int, tuple[tuple[int, ...], ...]] | None:
        """A collective's bytes over each device's link and the devices they travel between; ``None`` for
        any other instruction (see :func:`collective_link_bytes`)."""
        found = [(instruction, computation)] if is_collective(instruction.opcode) else []
        # A collective may run in a fusion of its own (XLA's Triton collectives on a GPU, a TPU's
        # asynchronous collective fusions), or fused with the matmul that reads it (a TPU's
        # all-gather and its dot), which then also counts as a kernel.
        if not found and instruction.opcode in ("fusion", "fusion-start", "async-start", "call-start"):
            called = _CALLS.findall(instruction.attributes)
            found = [(inner, called[0]) for inner in self.computations.get(called[0], [])
                     if is_collective(inner.opcode)] if called else []
        total, first = 0, None
        for collective, where in found:
            by_name = self.by_name.get(where, {})
            nbytes = sum(a.logical_bytes for o in collective.operands if o in by_name for a in by_name[o].arrays)
            groups = replica_group(collective.attributes, self.devices)
            total += collective_link_bytes(collective.opcode, nbytes, groups)
            first = groups if first is None else first
        return None if first is None else (total, tuple(tuple(group) for group in first))

    def schedule(self, computation: str, seen: frozenset = frozenset()) -> list[list[Any]] | None:
        """A computation in the order XLA scheduled it, as :func:`kernels` describes; ``None`` when it moves
        nothing to or from the host or between devices.

        Runs of kernels that move nothing to or from the host are merged into one
        ``kernels`` item, as are loops and calls whose computations move nothing either.
        """
        if computation in self.schedules:
            return self.schedules[computation]
        items: list[list[Any]] = []
        run: collections.Counter = collections.Counter()
        starts: dict[str, int] = {}
        traffic = False

        def flush() -> None:
            if run:
                items.append(["kernels", _merged(run, not self.tpu)])
                run.clear()

        for instruction in self.computations.get(computation, []):
            if instruction.opcode.endswith("-done") and instruction.operands and instruction.operands[0] in starts:
                flush()
                items.append(["done", starts[instruction.operands[0]]])
                continue
            for name, trips in self.called(instruction, seen, computation):
                inner = self.schedule(name, seen | {computation})
                if inner is None:  # no traffic inside: its kernels join the current run
                    self.walk(name, trips, seen | {computation}, run)
                else:
                    flush()
                    items.append(["run", name, trips])
                    traffic = True
            link = self.link(instruction, computation)
            if link is not None:
                flush()
                traffic = True
                asynchronous = instruction.opcode.endswith("-start") and '"is_sync":true' not in instruction.attributes
                if asynchronous:
                    starts[instruction.name] = len(starts)
                items.append(["collective-start" if asynchronous else "collective", link[0],
                              [list(group) for group in link[1]]])
                if instruction.opcode != "fusion":
                    continue
            cost = self.cost(instruction, computation)
            if cost is None:
                continue
            flops, device, host_out, host_in = cost
            if not host_out and not host_in:
                run[self.key(instruction, computation, flops, device)] += 1
                continue
            flush()
            traffic = True
            if instruction.opcode.endswith("-start"):
                starts[instruction.name] = len(starts)
                items.append(["start", host_out, host_in])
            else:
                items.append(["sync", host_out, host_in, dict(flops), device])
        flush()
        self.schedules[computation] = items if traffic else None
        return self.schedules[computation]

    def flops_once(self) -> int:
        """The matmul FLOPs of the program with each loop body once and custom calls left out (XLA's way)."""
        self.once, found, kept = True, collections.Counter(), (self.host_out, self.host_in, self.collectives.copy())
        try:
            self.walk(self.entry, 1, into=found)
        finally:
            self.once, (self.host_out, self.host_in, self.collectives) = False, kept  # the walk's own figures stay
        return sum(count * sum(dict(flops).values()) for (flops, *_), count in found.items())

    @staticmethod
    def slice_bytes(instruction: _Instruction, by_name: Mapping[str, _Instruction]) -> tuple[int, int, int]:
        """An asynchronous slice of a buffer, or update of one (how a TPU program moves bytes to and from the host).

        Only the slice moves: out of the buffer into device memory, or from device memory
        into the buffer; it crosses the host link when the buffer is in host memory.
        """
        buffer = by_name.get(instruction.operands[0]) if instruction.operands else None
        if instruction.opcode == "dynamic-update-slice-start":
            update = by_name.get(instruction.operands[1]) if len(instruction.operands) > 1 else None
            size = update.nbytes if update is not None else 0
        else:
            sizes = _dims(instruction.attributes, "dynamic_slice_sizes")
            pieces = [a for a in instruction.arrays if a.dims == sizes and not a.host]
            size = pieces[0].nbytes if pieces else 0
        if buffer is not None and buffer.on_host:
            return (size, size, 0) if instruction.opcode == "dynamic-update-slice-start" else (size, 0, size)
        return 2 * size, 0, 0

    @staticmethod
    def copy_bytes(instruction: _Instruction, by_name: Mapping[str, _Instruction]) -> tuple[int, int, int]:
        """An asynchronous copy between memory spaces: its source and destination arrays."""
        source = by_name.get(instruction.operands[0]) if instruction.operands else None
        destination = instruction.arrays[1] if len(instruction.arrays) > 1 else instruction.arrays[0]
        size = destination.nbytes
        source_host = source is not None and source.on_host
        if destination.host and not source_host:
            return size, size, 0
        if source_host and not destination.host:
            return size, 0, size
        return 2 * size, 0, 0


def kernels(text: str, platform: str = "cuda") -> dict[str, Any]:
    """The kernels of a compiled program's text (``compiled.as_text()``), for :func:`step_seconds`.

    Every instruction that launches work is one kernel: a fusion, or an instruction left
    unfused. For each, the FLOPs of its matrix multiplications (by the operands' dtype;
    in Pallas's Triton attention kernels, counted from the query's shape as causal)
    and the bytes it reads and writes in device memory; a loop body's kernels count
    once per iteration of the loop's known trip count. Bytes read from or written to
    host memory (``S(5)``) are counted apart, as host-link traffic each way. On a GPU,
    each kernel also carries its dots' shapes, ``[[b, m, n, k, kind], ...]``, and the
    bytes its reads across a transpose move beyond what they read (whole sectors for
    short runs of elements, :meth:`_Program.strided_bytes`):
    ``[count, {dtype: flops}, device_bytes, shapes, strided_bytes]``.

    A program that runs on several devices also gets ``"collectives"``: each instruction
    that moves bytes between devices (all-gather, reduce-scatter, all-reduce, all-to-all,
    permutes), not counted among the kernels, as ``[count, link_bytes, groups]``: the
    bytes each device sends over its link per run (:func:`collective_link_bytes`) and the
    devices they travel between (:func:`replica_group`).

    A program that moves bytes to or from the host or between devices also gets
    ``"schedule"``: the computations on the way to its transfers, each in the order XLA
    scheduled it, so that :func:`step_seconds` can overlap an asynchronous transfer with
    the kernels between its start and its done. Each computation is a list of items:
    ``["kernels", [[count, {dtype: flops}, device_bytes], ...]]`` (kernels that move
    nothing to or from the host, loops and calls of such kernels included),
    ``["start", host_out, host_in]`` (an asynchronous transfer starts),
    ``["done", i]`` (the computation waits for its ``i``-th start),
    ``["sync", host_out, host_in, {dtype: flops}, device_bytes]`` (a kernel that
    reads or writes host memory itself), ``["collective-start", link_bytes, groups]``
    (an asynchronous collective starts), ``["collective", link_bytes, groups]`` (a
    collective the program waits for where it stands) and ``["run", computation, times]``
    (a loop or call of a computation that has traffic of its own).

    On a TPU (``platform="tpu"``): loops without a trip count get theirs from their
    condition; arrays in the core's own memories (VMEM, SMEM) move no HBM bytes, the others
    count with their tiled layout's padding; matmuls are also convolutions; Pallas's splash
    kernels count their causal matrix products; asynchronous slices of a buffer in host
    memory cross the host link. The figures also hold ``"matmul_flops_once"``
    (:func:`matmul_flops_once`), to hold against XLA's own count, and
    ``"loops_counted_once"``: the loops whose trip count could not be read.

    Returns:
        ``{"kernels": [[count, {dtype: flops}, device_bytes], ...], "host_out": bytes,
        "host_in": bytes}``, kernels with the same figures merged, in a stable order;
        with collectives, also ``"collectives"``; with host traffic or collectives, also
        ``"schedule": {"entry": name, "computations": {name: items}}``;
        on a TPU, also ``"matmul_flops_once"`` and ``"loops_counted_once"``, and where the program
        calls Pallas kernels, ``"pallas_calls"`` (those calls in its text).
    """
    program = _Program(text, tpu=platform == "tpu")
    program.walk(program.entry, 1)
    figures: dict[str, Any] = {"kernels": _merged(program.found, platform != "tpu"), "host_out": program.host_out,
                               "host_in": program.host_in}
    if platform == "tpu":
        figures["loops_counted_once"] = len(program.unknown)
        figures["matmul_flops_once"] = program.flops_once()
        if pallas := text.count('custom_call_target="tpu_custom_call"'):
            figures["pallas_calls"] = pallas
    if any(is_collective(i.opcode) for body in program.computations.values() for i in body):
        figures["collectives"] = [[count, nbytes, [list(group) for group in groups]]
                                  for (nbytes, groups), count in sorted(program.collectives.items())]
    if program.host_out or program.host_in or program.collectives:
        program.schedule(program.entry)
        figures["schedule"] = {"entry": program.entry, "computations": {
            name: items for name, items in sorted(program.schedules.items()) if items is not None}}
    return figures


def named_kernels(text: str, platform: str = "cuda") -> list[list[Any]]:
    """Each kernel of :func:`kernels` apart, by its instruction's name (the ``hlo_op`` of a profiler's events).

    Returns:
        ``[[name, count, {dtype: flops}, device_bytes, shapes, strided_bytes], ...]`` in
        the program's order, ``count`` the runs per step and the last two as in
        :func:`kernels` (empty and 0 on a TPU); an instruction in several loop bodies or
        calls has one row for each.
    """
    program = _Program(text, tpu=platform == "tpu")
    found: collections.Counter = collections.Counter()
    program.walk(program.entry, 1, into=found, named=True)
    return [[name, count, dict(flops), device, [list(dot) for dot in dots], strided]
            for (name, flops, device, dots, strided), count in found.items()]


def matmul_flops_once(text: str, platform: str = "cuda") -> int:
    """The matmul FLOPs of a compiled program as XLA's ``cost_analysis()`` counts them: each loop body once,
    custom calls (Pallas kernels) left out. A check of :func:`kernels` against XLA's own count."""
    return _Program(text, tpu=platform == "tpu").flops_once()


@dataclasses.dataclass(frozen=True)
class Rates:
    """What :func:`step_seconds` times a kernel at.

    Attributes:
        flops_per_second: The matmul rate in use, by operand dtype (``"bf16"``, ``"f32"``, ...).
        memory_bandwidth: Device-memory bytes per second in use.
        host_bandwidth: Host-link bytes per second in use, each direction.
        dot_rate: FLOP/s of one dot by its shape ``(b, m, n, k, kind)``, or ``None`` where
            it has none; a dot it has no rate for, and matmul FLOPs no dot carries (Pallas's
            attention kernels), run at ``flops_per_second``.
        launch_seconds: A fixed cost of each kernel.
        parallelism: How much of the shorter of a kernel's matmul and memory times hides
            behind the longer: 1 is the roofline's ``max``.
        link_bandwidth: Bytes per second each device sends to the others of a collective,
            by the devices it travels between (see :func:`replica_group`), or ``None``:
            collectives at ``memory_bandwidth``.
    """

    flops_per_second: Mapping[str, float]
    memory_bandwidth: float
    host_bandwidth: float
    dot_rate: Callable[[int, int, int, int, str], float | None] | None = None
    launch_seconds: float = 0.0
    parallelism: float = 1.0
    link_bandwidth: Callable[[Sequence[Sequence[int]]], float] | None = None

    def collective(self, link_bytes: int, groups: Sequence[Sequence[int]]) -> float:
        """One collective's time: its launch, then its bytes over the link between its devices."""
        rate = self.link_bandwidth(groups) if self.link_bandwidth is not None else self.memory_bandwidth
        return self.launch_seconds + link_bytes / rate

    def parts(self, flops: Mapping[str, int], device: int, shapes: Sequence[Sequence[Any]] = (),
              strided: int = 0) -> tuple[float, float]:
        """One kernel's matmul time and memory time (its bytes and the sectors its strided reads waste)."""
        left = dict(flops)
        matmul = 0.0
        for b, m, n, k, kind in shapes if self.dot_rate is not None else ():
            rate = self.dot_rate(b, m, n, k, kind)
            if rate:
                matmul += 2 * b * m * n * k / rate
                left[kind] = left.get(kind, 0) - 2 * b * m * n * k
        matmul += sum(max(value, 0) / self.flops_per_second.get(kind, self.flops_per_second["f32"])
                      for kind, value in left.items())
        return matmul, (device + strided) / self.memory_bandwidth

    def kernel(self, flops: Mapping[str, int], device: int, shapes: Sequence[Sequence[Any]] = (),
               strided: int = 0) -> float:
        """One kernel's time (see :meth:`combined`)."""
        return self.combined(*self.parts(flops, device, shapes, strided))

    def combined(self, matmul: float, memory: float) -> float:
        """A kernel's time from its parts: its launch, then its longer part and what of its shorter does not hide."""
        return self.launch_seconds + max(matmul, memory) + (1 - self.parallelism) * min(matmul, memory)


def _row(row: Sequence[Any]) -> tuple[int, Mapping[str, int], int, Sequence[Sequence[Any]], int]:
    """A kernel row of :func:`kernels` as its count, FLOPs, bytes, dots' shapes and strided reads' extra bytes
    (none of the last two on a TPU)."""
    return row[0], row[1], row[2], row[3] if len(row) > 3 else (), row[4] if len(row) > 4 else 0


def _overlapped(schedule: Mapping[str, Any], name: str, rates: Rates) -> float:
    """The time of one run of a scheduled computation, its transfers overlapped with its kernels.

    The kernels run one after another. A transfer starts at its start, or when the host
    link has finished the transfers started before it (one link, one transfer at a time);
    the computation waits at the transfer's done for what is left of it. A transfer's own
    kernel (the copy) runs beside the other kernels and costs them nothing. Collectives
    do the same on the links between devices, one at a time; one the program does not
    start asynchronously holds the kernels until it ends.
    """
    now = link = network = 0.0
    ends: list[float] = []
    for item in schedule["computations"][name]:
        kind = item[0]
        if kind == "kernels":
            now += sum(count * rates.kernel(flops, device, shapes, strided)
                       for count, flops, device, shapes, strided in map(_row, item[1]))
        elif kind == "run":
            now += item[2] * _overlapped(schedule, item[1], rates)
        elif kind == "start":
            link = max(now, link) + (item[1] + item[2]) / rates.host_bandwidth
            ends.append(link)
        elif kind == "done":
            now = max(now, ends[item[1]])
        elif kind == "collective-start":  # the devices' links carry one collective at a time
            network = max(now, network) + rates.collective(item[1], item[2])
            ends.append(network)
        elif kind == "collective":
            now = network = max(now, network) + rates.collective(item[1], item[2])
        else:  # "sync": the kernel waits for the link, then runs as long as its slower side
            now = max(now, link) + max(rates.kernel(item[3], item[4]), (item[1] + item[2]) / rates.host_bandwidth)
            link = now
    return now


def step_seconds(figures: Mapping[str, Any], rates: Rates) -> dict[str, float]:
    """A step's time from :func:`kernels`: the kernels one after another, timed by ``rates``, then the host transfers.

    Returns ``seconds`` (every kernel, then every host transfer and every collective,
    overlapped with nothing),
    ``overlapped_seconds`` (the kernels one after another, each asynchronous host
    transfer overlapped with the kernels the schedule puts between its start and its
    done; ``seconds`` without ``"schedule"``), ``kernel_seconds`` (each kernel's time,
    :meth:`Rates.kernel`, summed), ``compute_seconds`` and ``memory_seconds`` (each
    resource alone, summed), ``transfer_seconds`` (the host link, out and back) and
    ``collective_seconds`` (each collective, :meth:`Rates.collective`, summed).
    """
    kernel = compute = memory = 0.0
    for count, flops, device, shapes, strided in map(_row, figures["kernels"]):
        matmul, moved = rates.parts(flops, device, shapes, strided)
        compute += count * matmul
        memory += count * moved
        kernel += count * rates.combined(matmul, moved)
    transfer = (int(figures["host_out"]) + int(figures["host_in"])) / rates.host_bandwidth
    collective = sum((count * rates.collective(nbytes, groups)
                      for count, nbytes, groups in figures.get("collectives", ())), 0.0)
    schedule = figures.get("schedule")
    serial = kernel + transfer + collective
    overlapped = _overlapped(schedule, schedule["entry"], rates) if schedule else serial
    return {"seconds": serial, "overlapped_seconds": overlapped, "kernel_seconds": kernel,
            "compute_seconds": compute, "memory_seconds": memory, "transfer_seconds": transfer,
            "collective_seconds": collective}
