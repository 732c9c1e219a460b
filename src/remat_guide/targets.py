"""TPUs and NVIDIA GPUs to compile for ahead of time, with no such device on the machine."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.metadata
import importlib.util
import mmap
import os
import pathlib
import re
import warnings
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from remat_guide import _matmul_table as matmul_table
from remat_guide import _roofline as roofline
from remat_guide._cache import captured_stderr, target_figures, unrun_options
from remat_guide._jax_internals import file_names_only

__all__ = ["EFFICIENCY", "GPU_KERNEL_LAUNCH_SECONDS", "GPU_MEMORY_COMPUTE_PARALLELISM", "GPU_SECTOR_BYTES",
           "TARGETS", "Estimate", "Hardware", "KernelTime", "Target", "device_bytes", "estimate_step", "kernel_rates",
           "kernel_times", "lowering_for", "place", "target", "target_devices", "usable_bytes"]

_TPU_EXTRA = "pip install '.[tpu]' in a clone of remat-guide (or: pip install libtpu==0.0.51)"
_GPU_EXTRA = ("pip install '.[gpu]' in a clone of remat-guide (or: pip install jax-cuda12-plugin==0.12.0.1 "
              "jax-cuda12-pjrt==0.12.0.1)")


@dataclasses.dataclass(frozen=True)
class Hardware:
    """An accelerator's published rates, which the step-time estimate divides by (see :func:`estimate_step`).

    Attributes:
        matmul_flops: Dense matrix-unit FLOP/s (no sparsity) by the operands' dtype:
            ``"bf16"`` (also float16), ``"f32"``, ``"f8"``, ``"int8"``, ``"f64"``. On a
            GPU, ``"f32"`` is TF32 (XLA's default precision runs float32 matmuls on
            tensor cores as TF32); on a TPU it is the bfloat16 rate (the default
            precision multiplies float32 operands in one bfloat16 pass), and a dtype
            the chip has no rate for runs at it too.
        memory_bandwidth: Device memory (HBM) bytes per second.
        host_bandwidth: Bytes per second each way between device and host memory: the
            PCIe link, or NVLink-C2C on a Grace-Blackwell superchip; ``None`` where the
            maker publishes none (TPU chips).
        source: Where the figures come from.
        matmul_table: XLA's measured table of matmul throughput by shape that this GPU's
            dots are timed from (``"sm_90"``: an H100's, scaled by this chip's bf16 peak
            over the H100's), or ``None``: its dots run at :data:`EFFICIENCY` of its peak.
        link_bandwidth: Bytes per second each way that a collective gets from one device
            to the others within ``link_domain``: NVLink's published rate per GPU (half
            its two-way figure); on a TPU, a ring along one axis of the torus, two of the
            chip's ICI ports each way (its published two-way ICI bandwidth over its ports).
        link_domain: How many consecutive devices share those links (a GPU node's eight),
            or ``None``: every device of the slice (a TPU).
        network_bandwidth: Bytes per second each way per device between domains: the
            node's network adapter for each GPU; ``None`` where nothing is modelled
            between domains (a TPU slice has none).
    """

    matmul_flops: dict[str, float]
    memory_bandwidth: float
    host_bandwidth: float | None
    source: str
    matmul_table: str | None = None
    link_bandwidth: float | None = None
    link_domain: int | None = None
    network_bandwidth: float | None = None


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A program's estimated step time on an accelerator (see :func:`estimate_step`), and the parts it adds up.

    Attributes:
        seconds: The estimate: ``kernel_seconds + transfer_seconds + collective_seconds``,
            every host transfer and every collective after the kernels, overlapped with nothing.
        overlapped_seconds: The kernels one after another, each asynchronous host
            transfer overlapped with the kernels that the compiled schedule places between
            its start and its done, and so is each asynchronous collective on the links
            between devices: what the schedule allows, which an H200's offloading steps
            did not reach (the guide's page on time on accelerators). Equal to ``seconds``
            for a program that moves nothing to or from the host or between devices.
        kernel_seconds: Each kernel's time (its matmul and memory times combined, see :func:`kernel_rates`), summed.
        compute_seconds: The matmul time alone, summed over kernels.
        memory_seconds: The device-memory time alone, summed over kernels.
        transfer_seconds: The host-link time: bytes out, then bytes back.
        collective_seconds: The time of the collectives between devices (all-gathers,
            reduce-scatters, all-reduces, all-to-alls, permutes): the bytes a ring sends
            from each device, at the published rate of the link they cross (NVLink within
            a node, the network between nodes, a TPU's ICI; :class:`Hardware`), each
            after a kernel's launch. 0 on one device.
    """

    seconds: float
    overlapped_seconds: float
    kernel_seconds: float
    compute_seconds: float
    memory_seconds: float
    transfer_seconds: float
    collective_seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class KernelTime:
    """One kernel of a compiled program and its estimated time per step (see :func:`kernel_times`).

    Attributes:
        name: The instruction that launches it, as ``compiled.as_text()`` and the
            ``hlo_op`` of ``jax.profiler``'s device events name it.
        count: How many times one step runs it (a loop body's kernels once per iteration).
        seconds: Its estimated time over the whole step: ``count`` runs.
        matmul_seconds: The matmul part of ``seconds`` alone.
        memory_seconds: The device-memory part of ``seconds`` alone: ``device_bytes`` and
            ``strided_bytes``.
        flops: Its matmul FLOPs over the step.
        device_bytes: The device-memory bytes it reads and writes over the step.
        strided_bytes: What its reads across a transpose move beyond what they read, over
            the step: a loop fusion that reads an operand a few elements at a time moves a
            whole 32-byte sector for each run (0 on a TPU, and for most kernels).
    """

    name: str
    count: int
    seconds: float
    matmul_seconds: float
    memory_seconds: float
    flops: int
    device_bytes: int
    strided_bytes: int = 0


EFFICIENCY = {"matmul": 0.7, "memory": 0.9, "host": 0.825}
"""The share of each published rate that :func:`estimate_step` assumes a program gets, the same on every target.

Matmul kernels reach about 70% of the dense tensor-core peak on large shapes; streaming
kernels about 90% of the HBM bandwidth; and ``jax.device_put`` between an H200's memory
and pinned host memory moved 52.8 GB/s of PCIe Gen5's 64 GB/s each way (measured on
2026-11-27, see ``docs/_hardware/``): 82.5%. On a GPU with a measured matmul table
(the ``matmul_table`` of :class:`Hardware`) each dot runs at the table's rate for its shape instead;
the 70% stays for the matmuls no table times. A TPU target gets the same shares of its
own rates: GPU figures, which no TPU run has checked.
"""

GPU_KERNEL_LAUNCH_SECONDS = 1e-6
"""The fixed cost of each kernel on a GPU, XLA's own figure (``kKernelLaunchOverhead`` in
``xla/service/gpu/model/gpu_performance_model_base.h``)."""

GPU_SECTOR_BYTES = roofline.SECTOR_BYTES
"""The bytes a GPU moves for any read that touches them, one sector (NVIDIA's CUDA C++ Best
Practices Guide, "Coalesced Access to Global Memory"). A loop fusion that reads its input
across a transpose, one element or a few at a time, moves a sector for each run. On an
H200, the three such kernels of the Llama 3.2 1B training step took 4.6 to 6.3 times
what their bytes alone would take, and counted in sectors they are estimated about a
fifth above what they took (the guide's page on kernels). XLA's own model charges a
64-byte DRAM-to-L2 transaction instead (``GetCoalescingWasteFactor``,
``xla/service/gpu/model/gpu_performance_model_base.cc``)."""

GPU_MEMORY_COMPUTE_PARALLELISM = 0.95
"""The share of a GPU kernel's shorter part (matmul or memory) that hides behind its longer, XLA's
own figure (``kMemoryComputeParallelism``, same file), so a kernel takes its longer part
plus 5% of its shorter. A TPU kernel takes its longer part (a roofline)."""


@dataclasses.dataclass(frozen=True)
class Target:
    """One accelerator that XLA compiles for without the device: a TPU generation or an NVIDIA GPU.

    Attributes:
        name: The name ``target=`` takes, such as ``"tpu-v5e"`` or ``"h100"``.
        platform: ``"tpu"`` or ``"cuda"``.
        device_kind: The device's own name, as ``device.device_kind`` reports it.
        topology: For a TPU, the generation as ``get_topology_desc`` names it (``"v5e"``);
            for a GPU, the ``device_description_str`` of its XLA target description.
        hardware: Its published rates (see :class:`Hardware`), which :func:`estimate_step`
            divides by.
        memory_bytes: The memory of one device (HBM), as its maker publishes it, in
            binary units (an H100's "80 GB" as 80 GiB). What a program may use is less:
            the CUDA context and the allocator's own share on a GPU, and by default JAX
            preallocates 75% of a GPU's memory (``XLA_CLIENT_MEM_FRACTION`` since jaxlib
            0.12, ``XLA_PYTHON_CLIENT_MEM_FRACTION`` before).
    """

    name: str
    platform: str
    device_kind: str
    topology: str
    hardware: Hardware | None = None
    memory_bytes: int = 0

    @property
    def ranks_by_time(self) -> bool:
        """Whether the package's picks rank on :func:`estimate_step` for this target.

        On a GPU they do: the guide measured the estimate's error on an H200. On a TPU
        chip the estimate is shown but not ranked on: no TPU run has checked it.
        """
        return self.platform == "cuda"

    @property
    def compiler(self) -> str:
        """Which XLA compiler produces this target's figures, with the package that ships it."""
        if self.platform == "tpu":
            return f"XLA's TPU compiler (libtpu {_version('libtpu')})"
        return f"XLA's GPU compiler (jax-cuda12-plugin {_version('jax-cuda12-plugin')})"

    def devices(self, count: int = 1) -> list[Any]:
        """``count`` devices of this target, for a mesh; see :func:`target_devices`."""
        return target_devices(self.name, count)


def _tpu(name: str, generation: str, kind: str, gib: int, bf16: float, int8: float, memory: float,
         ici: float, ports: int, source: str) -> Target:
    """A TPU target, one chip per device; memory in GiB, rates in TFLOP/s (TOP/s) and GB/s, as Google prints them
    (``ici``: the chip's two-way ICI bandwidth over its ``ports``)."""
    flops = {"bf16": bf16 * 1e12, "f32": bf16 * 1e12, "int8": int8 * 1e12}
    return Target(name, "tpu", kind, generation,
                  Hardware(flops, memory * 1e9, None, source, link_bandwidth=ici / ports * 1e9), gib * 2**30)


def _gpu(name: str, description: str, gib: int, bf16: float, tf32: float, f8: float, f64: float,
         memory: float, host: float, links: tuple[float, int, float], source: str, table: str | None = None) -> Target:
    """A GPU target; memory in GiB, rates in TFLOP/s and GB/s, as datasheets print them; ``links``: NVLink's
    two-way GB/s per GPU, the GPUs it joins, and the network adapter's Gb/s per GPU."""
    flops = {"bf16": bf16 * 1e12, "f32": tf32 * 1e12, "f8": f8 * 1e12, "int8": f8 * 1e12, "f64": f64 * 1e12}
    nvlink, domain, network = links
    return Target(name, "cuda", description, description,
                  Hardware(flops, memory * 1e9, host * 1e9, source, table, nvlink / 2 * 1e9, domain, network / 8 * 1e9),
                  gib * 2**30)


_PCIE4, _PCIE5, _PCIE6, _C2C = 32, 64, 128, 450  # GB/s each way: PCIe x16 generations, NVLink-C2C
# NVLink's two-way GB/s per GPU, the GPUs it joins, the network adapter's Gb/s per GPU: an eight-GPU
# node (NVIDIA's DGX datasheets: A100 with ConnectX-6 at 200 Gb/s, H100, H200 and B200 with
# ConnectX-7 at 400 Gb/s, B300 with ConnectX-8 at 800 Gb/s), an NVL72 rack, and H100 PCIe cards
# joined in pairs by NVLink bridges.
_NV3, _NV4, _NV5 = (600, 8, 200), (900, 8, 400), (1800, 8, 400)

TARGETS: dict[str, Target] = {t.name: t for t in (
    _tpu("tpu-v5e", "v5e", "TPU v5 lite", 16, 197, 393, 819, 400, 4, "Google Cloud TPU v5e documentation, per chip"),
    _tpu("tpu-v5p", "v5p", "TPU v5", 95, 459, 918, 2765, 1200, 6,
         "Google Cloud TPU v5p documentation, per chip (int8: Google's v5p announcement)"),
    _tpu("tpu-v6e", "v6e", "TPU v6 lite", 32, 918, 1836, 1638, 800, 4, "Google Cloud TPU v6e documentation, per chip"),
    _gpu("a100", "NVIDIA A100-SXM4-80GB", 80, 312, 156, 624, 19.5, 2039, _PCIE4, _NV3,
         "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB); PCIe Gen4 x16; DGX A100 networking"),
    _gpu("a100-40gb", "NVIDIA A100-SXM4-40GB", 40, 312, 156, 624, 19.5, 1555, _PCIE4, _NV3,
         "NVIDIA A100 Tensor Core GPU datasheet (SXM4 40GB); PCIe Gen4 x16; DGX A100 networking"),
    _gpu("h100", "NVIDIA H100 80GB HBM3", 80, 989.5, 494.7, 1979, 66.9, 3350, _PCIE5, _NV4,
         "NVIDIA H100 Tensor Core GPU datasheet (SXM5); PCIe Gen5 x16; DGX H100 networking", "sm_90"),
    _gpu("h100-pcie", "NVIDIA H100 PCIe", 80, 756.5, 378, 1513, 51.2, 2000, _PCIE5, (600, 2, 400),
         "NVIDIA H100 Tensor Core GPU datasheet (PCIe, NVLink bridge for two); PCIe Gen5 x16; "
         "DGX H100's networking assumed", "sm_90"),
    _gpu("h200", "NVIDIA H200 141GB HBM3e", 141, 989.5, 494.7, 1979, 66.9, 4800, _PCIE5, _NV4,
         "NVIDIA H200 Tensor Core GPU datasheet (SXM); PCIe Gen5 x16; DGX H200 networking", "sm_90"),
    _gpu("b200", "NVIDIA B200", 180, 2250, 1125, 4500, 37, 8000, _PCIE5, _NV5,
         "NVIDIA HGX B200 datasheet, per GPU; PCIe Gen5 x16; DGX B200 networking"),
    _gpu("b300", "NVIDIA B300", 288, 2250, 1125, 4500, 1.25, 8000, _PCIE6, (1800, 8, 800),
         "NVIDIA HGX B300 datasheet, per GPU; PCIe Gen6 x16; ConnectX-8 networking"),
    _gpu("gb200", "NVIDIA GB200", 186, 2500, 1250, 5000, 45, 8000, _C2C, (1800, 72, 400),
         "NVIDIA GB200 NVL72 datasheet, per GPU; NVLink-C2C to the Grace CPU (900 GB/s both ways)"),
)}
"""Every target under its name, TPU generations (one chip per device) and NVIDIA GPUs."""

# Chips per slice and the slice shape get_topology_desc takes: 2-D tori for the "e"
# generations, 3-D for v5p.
_TPU_SHAPES = {
    "2d": {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"},
    "3d": {1: "1x1x1", 4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4"},
}
_GPUS_PER_HOST = 8


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def target(name: Any) -> Target:
    """The :class:`Target` called ``name``.

    Args:
        name: A key of :data:`TARGETS`, or a :class:`Target`.

    Returns:
        The target.

    Raises:
        TypeError: If ``name`` is not a str or a :class:`Target`.
        ValueError: If no target has that name; the message lists the known ones.

    Examples:
        >>> from remat_guide.targets import target
        >>> target("h100").device_kind
        'NVIDIA H100 80GB HBM3'
        >>> target("tpu-v5e").platform
        'tpu'
        >>> target("h1000")
        Traceback (most recent call last):
        ...
        ValueError: target: unknown target 'h1000'; the known targets are tpu-v5e, tpu-v5p, ...
    """
    if isinstance(name, Target):
        return name
    if not isinstance(name, str):
        raise TypeError(f"target must be a str naming an accelerator or None, got {type(name).__name__}")
    if name not in TARGETS:
        raise ValueError(f"target: unknown target {name!r}; the known targets are {', '.join(TARGETS)}")
    return TARGETS[name]


_GPU_CONFIG = re.compile(rb'device_description_str: "([^"\n]*)"')
_GPU_MARKER = b"proto-message: stream_executor.GpuTargetConfigProto"


@functools.cache
def _gpu_target_configs() -> dict[str, str]:
    """XLA's GPU target descriptions that the installed CUDA plugin carries, by device name.

    The plugin embeds each of XLA's ``target_config/specs/*.txtpb`` files, licence header
    included, as a text protocol buffer; they are read from it rather than shipped here.
    """
    spec = importlib.util.find_spec("jax_plugins.xla_cuda12")
    if spec is None or spec.origin is None:
        raise ImportError(f"an NVIDIA GPU target needs XLA's GPU compiler, which is not installed: {_GPU_EXTRA}")
    library = pathlib.Path(spec.origin).parent / "xla_cuda_plugin.so"
    configs = {}
    with open(library, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = data.find(_GPU_MARKER)
        while at >= 0:
            start = data.rfind(b"\0", 0, at) + 1
            end = data.find(b"\0", at)
            text = data[start:end]
            match = _GPU_CONFIG.search(text)
            if match:
                configs[match.group(1).decode()] = text.decode()
            at = data.find(_GPU_MARKER, end)
    return configs


@functools.cache
def _devices(name: str, count: int) -> tuple[Any, ...]:
    chosen = TARGETS[name]
    from jax.experimental import topologies

    if chosen.platform == "tpu":
        if importlib.util.find_spec("libtpu") is None:
            raise ImportError(f"target={name!r} needs XLA's TPU compiler, which is not installed: {_TPU_EXTRA}")
        shapes = _TPU_SHAPES["3d" if chosen.topology == "v5p" else "2d"]
        if count not in shapes:
            raise ValueError(f"count: a {chosen.device_kind} slice has {', '.join(map(str, shapes))} chips, "
                             f"got {count}")
        # libtpu takes a lock file so that one process at a time drives the machine's TPUs;
        # devices for compiling only drive none, and every build and test process may need them.
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        with captured_stderr() as noise:
            try:
                topology = topologies.get_topology_desc(platform="tpu",
                                                        topology_name=f"{chosen.topology}:{shapes[count]}")
            except Exception as error:
                raise RuntimeError(f"XLA's TPU compiler could not describe {count} {chosen.device_kind} "
                                   f"chips: {error}") from error
        del noise
        return tuple(topology.devices)
    if count > _GPUS_PER_HOST and count % _GPUS_PER_HOST:
        raise ValueError(f"count: more than {_GPUS_PER_HOST} GPUs come in hosts of {_GPUS_PER_HOST}, "
                         f"so a multiple of {_GPUS_PER_HOST}; got {count}")
    config = _gpu_target_configs().get(chosen.topology)
    if config is None:
        raise RuntimeError(f"the installed jax-cuda12-plugin has no XLA target description of {chosen.topology}")
    hosts, per_host = (count // _GPUS_PER_HOST, _GPUS_PER_HOST) if count > _GPUS_PER_HOST else (1, count)
    try:
        topology = topologies.get_topology_desc(platform="cuda", target_config=config,
                                                topology=f"1x{hosts}x{per_host}")
    except Exception as error:
        raise RuntimeError(
            f"XLA's GPU compiler could not describe {count} {chosen.device_kind}: {error}. On a machine "
            "without an NVIDIA driver, the CUDA plugin registers only when JAX starts with "
            "JAX_PLATFORMS=cpu (set it before importing jax)") from error
    return tuple(topology.devices)


def target_devices(name: str | Target, count: int = 1) -> list[Any]:
    """``count`` devices of an accelerator, described without the hardware, to build a mesh on.

    XLA compiles for these devices ahead of time: ``jax.jit(f).lower(...).compile()`` with
    arguments placed on a mesh of them (``jax.ShapeDtypeStruct`` values with a
    ``NamedSharding``) gives that accelerator's program and ``memory_analysis()``. Nothing
    can run on them. The same call returns the same devices.

    Args:
        name: A target's name (see :data:`TARGETS`) or a :class:`Target`.
        count: How many devices: for a TPU, the chips of a slice (1, 4, 8, 16, ...); for a
            GPU, up to 8 on one host, or a multiple of 8 over several hosts.

    Returns:
        The devices, in the order of their ids.

    Raises:
        TypeError: If ``name`` or ``count`` has the wrong type.
        ValueError: If the target is unknown, or ``count`` is not a size that target comes in.
        ImportError: If XLA's compiler for that accelerator is not installed; the message
            names the ``pip install`` to run.

    Examples:
        >>> from remat_guide.targets import target_devices
        >>> devices = target_devices("tpu-v5e", 8)
        >>> len(devices), devices[0].device_kind
        (8, 'TPU v5 lite')
        >>> target_devices("h100", 2)[1].device_kind
        'NVIDIA H100 80GB HBM3'
    """
    chosen = target(name)
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)):
        raise TypeError(f"count must be an int, got {type(count).__name__}")
    if count < 1:
        raise ValueError(f"count must be positive, got {count}")
    return list(_devices(chosen.name, int(count)))


_AVAILABLE = re.compile(r"exceeds available HBM \(([\d.]+)G\)")


@contextlib.contextmanager
def lowering_for(name: str | Target) -> Iterator[None]:
    """The context to lower a program for a target in, so that it lowers the same in every checkout.

    Two things change inside it. Source files are recorded by their base name only: a
    Pallas kernel (such as the ``"fused"`` attention of
    :func:`remat_guide.models.decoder_loss`) carries source files in its serialized IR
    (its caller's, or its own inside JAX's installation), and with their folders in it the
    same program would differ between two clones. For
    a GPU, one of the target's devices is JAX's default device: Pallas's Triton kernels are
    lowered for the default device's kind of GPU and could not lower otherwise on a machine
    without that GPU. JAX 0.12 warns at each such lowering that the Pallas Triton backend is
    deprecated (in favour of Mosaic GPU); that one warning is silenced here. Programs without
    a kernel lower the same in it as outside it.

    Examples:
        >>> import jax
        >>> from remat_guide.targets import lowering_for, place
        >>> x = place(jax.ShapeDtypeStruct((4,), "float32"), "h100")
        >>> with lowering_for("h100"):
        ...     lowered = jax.jit(lambda x: x * 2).lower(x)
        >>> lowered.compile().memory_analysis().output_size_in_bytes
        16
    """
    chosen = target(name)
    with contextlib.ExitStack() as stack:
        stack.enter_context(file_names_only())
        if chosen.platform != "tpu":
            stack.enter_context(jax.default_device(target_devices(chosen)[0]))
            stack.enter_context(warnings.catch_warnings())
            warnings.filterwarnings("ignore", "The Pallas Triton backend is deprecated", DeprecationWarning)
        yield


def usable_bytes(name: str | Target) -> int:
    """The HBM that XLA's TPU compiler lets one program use on a TPU chip, read from the compiler.

    It is less than the chip's ``memory_bytes``: the compiler keeps some of it back. This
    function compiles, ahead of time, a program too large for the chip and reads the
    figure from the compiler's refusal ("exceeds available HBM (15.75G)"), in units of
    1024 to two decimals. It is the budget to compare a TPU program's ``device_bytes``
    with: a program needing more than the chip's usable HBM but less than its
    ``memory_bytes`` is refused. The figure is rounded; where it decides, the compiler
    does (:func:`remat_guide.fit.largest_batch` and :func:`remat_guide.recommend_policy`
    never count a refused program as fitting).

    Args:
        name: A TPU target's name (see :data:`TARGETS`) or a :class:`Target`.

    Returns:
        The usable bytes of one chip.

    Raises:
        TypeError: If ``name`` is not a str or a :class:`Target`.
        ValueError: If the target is unknown, or a GPU (XLA's GPU compiler does not check
            a program's memory; the budget there is yours to choose).
        ImportError: If XLA's TPU compiler is not installed.

    Examples:
        >>> from remat_guide.targets import target, usable_bytes
        >>> usable_bytes("tpu-v5e") / 2**30, target("tpu-v5e").memory_bytes / 2**30
        (15.75, 16.0)
    """
    chosen = target(name)
    if chosen.platform != "tpu":
        raise ValueError(f"name: {chosen.name} is a GPU; XLA's GPU compiler does not check a program's memory, "
                         "so a GPU has no compiler's budget (choose one, such as 90% of memory_bytes)")
    return _usable_bytes(chosen.name)


@functools.cache
def _usable_bytes(name: str) -> int:
    chosen = TARGETS[name]
    device = target_devices(chosen, 1)[0]
    too_large = jax.ShapeDtypeStruct((chosen.memory_bytes // 4 + 2**20,), np.float32,
                                     sharding=jax.sharding.SingleDeviceSharding(device))
    lowered = jax.jit(lambda x: x + 1).trace(too_large).lower()
    try:
        target_figures(lowered, chosen.name, chosen.platform, unrun_options(chosen.platform))
    except jax.errors.JaxRuntimeError as error:
        found = _AVAILABLE.search(str(error))
        if found:
            return round(float(found.group(1)) * 2**30)
        raise
    raise RuntimeError(f"XLA's TPU compiler compiled a program larger than {chosen.name}'s HBM; "
                       "its usable HBM could not be read")


def _mesh_on(target_: Target, mesh: jax.sharding.Mesh) -> jax.sharding.Mesh:
    devices = np.array(target_devices(target_, mesh.size), dtype=object).reshape(mesh.devices.shape)
    return jax.sharding.Mesh(devices, mesh.axis_names)


def _is_sharded(sharding: Any) -> bool:
    return isinstance(sharding, jax.sharding.NamedSharding) and sharding.mesh.size > 1


def place(args: Any, name: str | Target) -> Any:
    """``args`` (any pytree) as ``jax.ShapeDtypeStruct`` values placed on an accelerator's devices.

    A leaf sharded with a ``NamedSharding`` keeps its spec, on a mesh of the same shape
    and axis names over the target's devices; every other leaf is replicated over those
    devices (as ``jax.jit`` treats it), or sits on one device when no leaf is sharded.
    ``jax.jit(f).lower(*place(args, name)).compile()`` then compiles for that accelerator.

    Args:
        args: Arrays, numbers or ``jax.ShapeDtypeStruct`` values, in any pytree.
        name: A target's name (see :data:`TARGETS`) or a :class:`Target`.

    Returns:
        The same pytree of ``jax.ShapeDtypeStruct`` values.

    Raises:
        TypeError, ValueError, ImportError: As for :func:`target_devices`.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide.targets import place
        >>> w, x = place((jnp.ones((256, 256)), jnp.ones((8, 256))), "tpu-v5e")
        >>> compiled = jax.jit(lambda w, x: jnp.tanh(x @ w).sum()).lower(w, x).compile()
        >>> compiled.memory_analysis().argument_size_in_bytes == 4 * (256 * 256 + 8 * 256)
        True
    """
    target_ = target(name)
    meshes: dict[int, jax.sharding.Mesh] = {}
    for leaf in jax.tree.leaves(args):
        sharding = getattr(leaf, "sharding", None)
        if _is_sharded(sharding) and id(sharding.mesh) not in meshes:
            meshes[id(sharding.mesh)] = _mesh_on(target_, sharding.mesh)
    # The other leaves are replicated over the sharded leaves' devices, as jax.jit treats
    # them; one program cannot take arguments on different sets of devices.
    rest = next(iter(meshes.values()), None)
    if rest is None:
        rest = jax.sharding.Mesh(np.array(target_devices(target_, 1), dtype=object), ("device",))

    def placed(leaf: Any) -> Any:
        sharding = getattr(leaf, "sharding", None)
        if _is_sharded(sharding):
            new = jax.sharding.NamedSharding(meshes[id(sharding.mesh)], sharding.spec)
        else:
            new = jax.sharding.NamedSharding(rest, jax.sharding.PartitionSpec())
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=new,
                                        weak_type=getattr(leaf, "weak_type", False))
        dtype = jax.numpy.result_type(leaf)
        return jax.ShapeDtypeStruct((), dtype, sharding=new, weak_type=True)

    return jax.tree.map(placed, args)


def device_bytes(memory: Any, name: str | Target | None = None) -> int:
    """The bytes of device memory a compiled program needs, the figure that decides whether it fits.

    Which ``memory_analysis()`` field decides depends on the compiler that planned it:

    - an NVIDIA GPU target: arguments + outputs + temporary buffers - aliased bytes.
      On an H200 the allocator's real peak over a run equalled that sum to within
      0.02 MiB (12 programs of 1 to 13 GiB), while ``peak_memory_in_bytes`` was up to
      36% above it for programs that offload and below it for others
      (``docs/_hardware/``).
    - a TPU target: ``peak_memory_in_bytes``, the figure XLA's TPU compiler itself holds
      against the chip's memory when it refuses a program as too large; it is at least
      that sum on TPU programs, padding of tiled layouts included.
    - ``None``, this machine's CPU: the temporary buffers alone; XLA's CPU peak counts
      only arguments and outputs, the same under every policy.

    Args:
        memory: ``compiled.memory_analysis()``, or any object with its ``*_size_in_bytes``
            attributes.
        name: The target the program was compiled for, or ``None`` for this machine.

    Returns:
        The bytes.

    Raises:
        TypeError: If ``memory`` lacks a field this backend's figure needs.
        ValueError: If ``name`` is not a known target.

    Examples:
        >>> import types
        >>> from remat_guide.targets import device_bytes
        >>> memory = types.SimpleNamespace(argument_size_in_bytes=100, output_size_in_bytes=100,
        ...     alias_size_in_bytes=0, temp_size_in_bytes=50, peak_memory_in_bytes=300)
        >>> device_bytes(memory, "h100"), device_bytes(memory, "tpu-v5e"), device_bytes(memory)
        (250, 300, 50)
    """
    chosen = None if name is None else target(name)
    fields = (("temp_size_in_bytes",) if chosen is None else
              ("peak_memory_in_bytes",) if chosen.platform == "tpu" else
              ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes"))
    values = []
    for field in fields:
        value = getattr(memory, field, None)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"memory must be compiled.memory_analysis() (or have its int {field}), got "
                            f"{type(memory).__name__}")
        values.append(int(value))
    if len(values) == 1:
        return values[0]
    arguments, outputs, temp, alias = values
    return arguments + outputs + temp - alias


def estimate_step(program: Any, name: str | Target, rates: roofline.Rates | None = None) -> Estimate:
    """An estimate of one run's time on a GPU or a TPU chip, from the program XLA compiled for it.

    Every kernel of the compiled program (a fusion, or an instruction left unfused; a loop
    body's kernels once per iteration) has two times: its matrix multiplications' FLOPs at
    the device's matrix rate, and the bytes it reads and writes at the HBM bandwidth. Each
    rate is the target's published figure (:class:`Hardware`) times :data:`EFFICIENCY`,
    except that on an H100, H100 PCIe or H200 each dot runs at the rate XLA measured for
    its shape on an H100 (the ``matmul_table`` of :class:`Hardware`). On a TPU a kernel takes the
    longer of its two times (a roofline); on a GPU, as XLA's own performance model has
    it, the longer plus 5% of the shorter, plus a microsecond to launch it
    (:data:`GPU_MEMORY_COMPUTE_PARALLELISM`, :data:`GPU_KERNEL_LAUNCH_SECONDS`). A GPU
    loop fusion that reads its input across a transpose, a few neighbouring elements at
    a time, moves a whole :data:`GPU_SECTOR_BYTES` sector for each such run
    (``strided_bytes`` of :class:`KernelTime`). The kernels run one after another; then the
    bytes moved to and from host memory cross the host link, and each collective between
    devices sends what a ring sends from each device at the published rate of the link
    it crosses (``collective_seconds``), all overlapped with nothing: ``seconds``.
    :func:`kernel_rates` gives the rates in use.

    The compiled program starts each host transfer asynchronously and waits for it later,
    with kernels scheduled in between. ``overlapped_seconds`` runs each transfer on the
    host link from its start (one at a time) and waits at its done only for what is left
    of it after those kernels; each collective the program starts asynchronously likewise
    on the links between devices, and one it runs synchronously holds the kernels. It is
    not the estimate: on an H200, every offloading step
    of the three larger models the guide timed, as a ratio to no checkpoint's time, came
    closer to ``seconds`` than to this (the guide's page on time on accelerators).

    On a TPU the compiled program's loops carry no trip count; each is read from the
    loop's condition. Arrays the compiler placed in the core's own memories (VMEM, SMEM)
    cost no HBM bytes; the others count with their tiled layout's padding. Pallas's splash
    attention kernels count the FLOPs of their matrix products from the query's shape, as
    causal. The TPU estimate has not been checked against a TPU run: the guide compares it
    with XLA's own cost analysis and with a published MaxText MFU.

    Left out of ``seconds``: transfers hidden behind compute (``overlapped_seconds``),
    memory-bound kernels slower than 90% of the bandwidth for other reasons (reductions,
    XLA's Triton fusions of a softmax, small kernels), elementwise math, autotuning's
    choice of kernels, collectives slower than their link's published rate (latency,
    small messages, a ring over several axes of a TPU torus, which has more ports). The
    collectives' part has not been checked against a run on several devices. It is a
    model, compared with an H200's measured step times on the guide's page on time on
    accelerators.

    Args:
        program: What XLA compiled for ``name``: a ``jax.stages.Compiled``, its text
            (``compiled.as_text()``), or the kernels the figure store keeps for it;
            compiled ahead of time, or on the GPU itself, where autotuning hands most dots
            to cuBLAS (their calls count as dots).
        name: A target (see :data:`TARGETS`).
        rates: What to time the kernels at; :func:`kernel_rates` of ``name`` by default.

    Returns:
        The estimate and its parts, in seconds.

    Raises:
        TypeError: If ``program`` is none of those.
        ValueError: If ``name`` is unknown, or ``program`` moves bytes to or from host
            memory on a target whose host link has no published rate (TPU chips).

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide.targets import estimate_step, place
        >>> w, x = place((jnp.ones((4096, 4096), jnp.bfloat16), jnp.ones((4096, 4096), jnp.bfloat16)), "h100")
        >>> compiled = jax.jit(lambda w, x: x @ w).lower(w, x).compile()
        >>> estimate = estimate_step(compiled, "h100")
        >>> round(estimate.compute_seconds * 1e6)  # 2 * 4096**3 FLOPs at XLA's measured 786 TFLOP/s
        175
        >>> estimate.seconds == estimate.overlapped_seconds == estimate.kernel_seconds, estimate.transfer_seconds
        (True, 0.0)
        >>> estimate.collective_seconds  # one device
        0.0
        >>> round(estimate_step(compiled, "b200").compute_seconds * 1e6)  # no table: 70% of 2250 TFLOP/s
        87
        >>> on_tpu = place((jnp.ones((4096, 4096), jnp.bfloat16), jnp.ones((4096, 4096), jnp.bfloat16)), "tpu-v5e")
        >>> tpu = estimate_step(jax.jit(lambda w, x: x @ w).lower(*on_tpu).compile(), "tpu-v5e")
        >>> round(tpu.compute_seconds * 1e6)  # at 70% of 197 TFLOP/s
        997
    """
    chosen = target(name)
    if isinstance(program, dict) and "kernels" in program:
        figures = program
    elif (text := _program_text(program)) is not None:
        figures = roofline.kernels(text, chosen.platform)
    else:
        raise TypeError(f"program must be a compiled program, its text or its stored kernels, got "
                        f"{type(program).__name__}")
    hardware = chosen.hardware
    host = hardware.host_bandwidth
    if host is None and (figures["host_out"] or figures["host_in"]):
        raise ValueError(f"program moves {int(figures['host_out']) + int(figures['host_in'])} bytes to or from host "
                         f"memory, and {chosen.name} has no published host-link rate to time them at")
    return Estimate(**roofline.step_seconds(figures, _rates_for(chosen, rates)))


def _program_text(program: Any) -> str | None:
    """A compiled program's text, from the program or the text itself; ``None`` for anything else."""
    if isinstance(program, str):
        return program
    if hasattr(program, "as_text") and hasattr(program, "memory_analysis"):
        return program.as_text()
    return None


def _rates_for(chosen: Target, rates: Any) -> roofline.Rates:
    """``rates``, checked, or the target's own (:func:`kernel_rates`) when it is ``None``."""
    if rates is not None and not isinstance(rates, roofline.Rates):
        raise TypeError(f"rates must be what kernel_rates returns, got {type(rates).__name__}")
    return rates or kernel_rates(chosen)


def kernel_times(program: Any, name: str | Target, rates: roofline.Rates | None = None) -> list[KernelTime]:
    """Each kernel's share of :func:`estimate_step`'s ``kernel_seconds``, longest first: to hold against a profile.

    A profile of the program on the device (``jax.profiler``; the ``hlo_op`` of each
    device event) names the same instructions, so that each kernel's estimate can be
    compared with its measured duration. Host transfers are not kernels and are left out.

    Args:
        program: What XLA compiled for ``name``: a ``jax.stages.Compiled`` or its text
            (``compiled.as_text()``); a program compiled on the device itself will do.
        name: A target (see :data:`TARGETS`).
        rates: What to time the kernels at; :func:`kernel_rates` of ``name`` by default.

    Returns:
        One :class:`KernelTime` for each instruction in each loop body or call that holds it, longest first.

    Raises:
        TypeError: If ``program`` is neither.
        ValueError: If ``name`` is unknown.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide.targets import estimate_step, kernel_times, place
        >>> w, x = place((jnp.ones((4096, 4096), jnp.bfloat16), jnp.ones((4096, 4096), jnp.bfloat16)), "h100")
        >>> compiled = jax.jit(lambda w, x: jnp.tanh(x @ w)).lower(w, x).compile()
        >>> times = kernel_times(compiled, "h100")
        >>> [(t.count, t.flops, t.matmul_seconds > t.memory_seconds) for t in times]
        [(1, 137438953472, True)]
        >>> sum(t.seconds for t in times) == estimate_step(compiled, "h100").kernel_seconds
        True
    """
    chosen = target(name)
    text = _program_text(program)
    if text is None:
        raise TypeError(f"program must be a compiled program or its text, got {type(program).__name__}")
    rates = _rates_for(chosen, rates)
    found = []
    for instruction, count, flops, device, shapes, strided in roofline.named_kernels(text, chosen.platform):
        matmul, memory = rates.parts(flops, device, shapes, strided)
        found.append(KernelTime(instruction, count, count * rates.combined(matmul, memory), count * matmul,
                                count * memory, count * sum(flops.values()), count * device, count * strided))
    return sorted(found, key=lambda kernel: (-kernel.seconds, kernel.name))


def kernel_rates(name: str | Target, plain: bool = False) -> roofline.Rates:
    """What :func:`estimate_step` times each kernel at on a target: its rates times :data:`EFFICIENCY`,
    its dots from its matmul table where it has one, and on a GPU, XLA's launch cost and overlap.

    With ``plain``, the plain roofline instead, as the estimate was before it read XLA's
    tables: every matmul at :data:`EFFICIENCY` of the peak, each kernel as long as its
    longer part, no launch cost.

    Examples:
        >>> rates = kernel_rates("h200")
        >>> round(rates.memory_bandwidth / 1e9), rates.launch_seconds, rates.parallelism
        (4320, 1e-06, 0.95)
        >>> round(rates.dot_rate(1, 4096, 4096, 4096, "bf16") / 1e12, 1)  # XLA's H100 table
        786.0
        >>> kernel_rates("tpu-v5e").dot_rate is None, kernel_rates("tpu-v5e").parallelism
        (True, 1.0)
        >>> plain = kernel_rates("h200", plain=True)
        >>> plain.dot_rate is None, plain.launch_seconds, plain.parallelism
        (True, 0.0, 1.0)
    """
    chosen = target(name)
    hardware = chosen.hardware
    gpu = chosen.platform == "cuda" and not plain
    return roofline.Rates(
        {kind: rate * EFFICIENCY["matmul"] for kind, rate in hardware.matmul_flops.items()},
        hardware.memory_bandwidth * EFFICIENCY["memory"], (hardware.host_bandwidth or 1.0) * EFFICIENCY["host"],
        dot_rate=None if plain else _dot_rate(hardware), launch_seconds=GPU_KERNEL_LAUNCH_SECONDS if gpu else 0.0,
        parallelism=GPU_MEMORY_COMPUTE_PARALLELISM if gpu else 1.0, link_bandwidth=_link_rate(hardware))


def _link_rate(hardware: Hardware) -> Any:
    """A collective's bytes per second each way by the devices it joins: within one domain, its links';
    across domains, the network's. ``None`` for hardware without a published link rate."""
    if hardware.link_bandwidth is None:
        return None
    domain, within, between = hardware.link_domain, hardware.link_bandwidth, hardware.network_bandwidth

    def rate(groups: Any) -> float:
        if domain is None or between is None or all(len({device // domain for device in group}) <= 1
                                                     for group in groups):
            return within
        return between

    return rate


def _dot_rate(hardware: Hardware) -> Any:
    """A dot's FLOP/s by its shape from the hardware's matmul table, scaled to its bf16 peak; ``None`` without one."""
    if hardware.matmul_table is None:
        return None
    table = hardware.matmul_table
    measured_on = TARGETS[matmul_table.TABLES[table][1]].hardware
    scale = hardware.matmul_flops["bf16"] / measured_on.matmul_flops["bf16"]

    def rate(b: int, m: int, n: int, k: int, kind: str) -> float | None:
        found = matmul_table.dot_rate(table, b, m, n, k, kind)
        return None if found is None else found * scale

    return rate
