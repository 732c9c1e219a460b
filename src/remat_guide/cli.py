"""The ``remat-guide`` command: which policy, at what batch, how fast, on which accelerator, from one command."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import math
import os
import pathlib
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

__all__ = ["BAD_INPUT", "DEFAULT_POLICIES", "FITS", "NOTHING_FITS", "PRESETS", "UsageError", "default_budget",
           "main", "read_config", "run"]

FITS, NOTHING_FITS, BAD_INPUT = 0, 1, 2
"""The exit statuses: a policy fits (or the targets were listed), nothing fits, the input was wrong."""

PRESETS = {"llama3-1b": "1b", "llama3-8b": "8b", "llama3-70b": "70b"}
"""The model names ``fit`` takes in place of a ``config.json``: keys of :data:`remat_guide.models.LLAMA3`."""

DEFAULT_POLICIES = ("full", "minimal", "save_qkv_proj")
"""The policies ``fit`` compares when ``--policies`` is left out (MaxText's names), after no checkpoint."""

_MODEL_TYPES = ("llama", "mistral", "qwen2")
_ACTIVATIONS = ("silu", "swish")
_OPTIMIZERS = ("adamw", "adafactor", "sgd")
_DTYPES = {"f32": "float32", "fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16"}
_MESH_AXES = ("data", "fsdp", "tensor")


class UsageError(ValueError):
    """Input the command refuses; its message names the flag or the config field, and the command exits 2."""


def _positive_field(config: Mapping[str, Any], field: str, where: str, default: Any = None) -> int:
    value = config.get(field, default)
    if value is None:
        raise UsageError(f"{where}: missing field {field!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UsageError(f"{where}: field {field!r} must be a positive integer, got {value!r}")
    return value


def read_config(source: str | os.PathLike[str] | Mapping[str, Any], seq: int | None = None) -> Any:
    """A Hugging Face decoder's ``config.json`` (a path, or its contents) as a decoder's sizes.

    Reads ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
    ``num_key_value_heads`` (the attention heads when absent), ``intermediate_size``,
    ``vocab_size``, ``tie_word_embeddings``, ``head_dim``, ``rope_theta`` and the
    activation (``hidden_act``) of a Llama, Mistral or Qwen2 model. Biases (Qwen2's
    query, key and value biases) are left out: a few kilobytes a layer.

    Args:
        source: The path of a ``config.json``, or the mapping it holds.
        seq: The tokens per sequence it will be measured at, to check a sliding window
            against; ``None`` to skip that check.

    Returns:
        A :class:`~remat_guide.models.DecoderConfig`, named after the config's ``_name_or_path`` (or its file's folder).

    Raises:
        UsageError: A ValueError naming the field the package does not model (another
            ``model_type``, an activation other than SiLU, a ``head_dim`` other than
            ``hidden_size / num_attention_heads``, a sliding window shorter than ``seq``)
            or that is missing or malformed, or naming the file when it cannot be read.

    Examples:
        >>> from remat_guide.cli import read_config
        >>> config = read_config({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
        ...                       "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        ...                       "vocab_size": 128256, "hidden_act": "silu", "rope_theta": 500000.0})
        >>> config.layers, config.kv_heads, config.head_dim, config.tied_embeddings
        (32, 8, 128, False)
        >>> read_config({"model_type": "gemma", "hidden_size": 2048})
        Traceback (most recent call last):
        ...
        remat_guide.cli.UsageError: config.json: field 'model_type' is 'gemma'; the package models llama, mistral, qwen2
    """
    from remat_guide.models import DecoderConfig

    where = "config.json"
    if isinstance(source, Mapping):
        config = dict(source)
        name = str(config.get("_name_or_path") or "config.json")
    else:
        path = pathlib.Path(source)
        where = str(path)
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError(f"{where}: no such file (give a config.json or one of {', '.join(PRESETS)})") from None
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise UsageError(f"{where}: not a readable JSON file ({error})") from None
        if not isinstance(config, dict):
            raise UsageError(f"{where}: a config.json holds a JSON object, got {type(config).__name__}")
        name = str(config.get("_name_or_path") or path.resolve().parent.name or path.name)
    model_type = config.get("model_type")
    if model_type is None:
        raise UsageError(f"{where}: missing field 'model_type' (one of {', '.join(_MODEL_TYPES)})")
    if model_type not in _MODEL_TYPES:
        raise UsageError(f"{where}: field 'model_type' is {model_type!r}; the package models "
                         f"{', '.join(_MODEL_TYPES)}")
    d_model = _positive_field(config, "hidden_size", where)
    layers = _positive_field(config, "num_hidden_layers", where)
    heads = _positive_field(config, "num_attention_heads", where)
    kv_heads = _positive_field(config, "num_key_value_heads", where, default=heads)
    mlp_dim = _positive_field(config, "intermediate_size", where)
    vocab = _positive_field(config, "vocab_size", where)
    activation = config.get("hidden_act", config.get("hidden_activation", "silu"))
    if activation not in _ACTIVATIONS:
        field = "hidden_act" if "hidden_act" in config else "hidden_activation"
        raise UsageError(f"{where}: field {field!r} is {activation!r}; the package models a SwiGLU MLP (silu)")
    if d_model % heads:
        raise UsageError(f"{where}: field 'hidden_size' ({d_model}) must be a multiple of 'num_attention_heads' "
                         f"({heads})")
    if config.get("head_dim") is not None and config["head_dim"] != d_model // heads:
        raise UsageError(f"{where}: field 'head_dim' is {config['head_dim']!r}; the package models heads of "
                         f"hidden_size / num_attention_heads = {d_model // heads}")
    if heads % kv_heads:
        raise UsageError(f"{where}: field 'num_attention_heads' ({heads}) must be a multiple of "
                         f"'num_key_value_heads' ({kv_heads})")
    if (d_model // heads) % 2:
        raise UsageError(f"{where}: field 'hidden_size' / 'num_attention_heads' ({d_model // heads}) must be "
                         "even: rotary embeddings turn pairs of features")
    tied = config.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise UsageError(f"{where}: field 'tie_word_embeddings' must be true or false, got {tied!r}")
    theta = config.get("rope_theta", 10_000.0)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise UsageError(f"{where}: field 'rope_theta' must be a positive number, got {theta!r}")
    window = config.get("sliding_window")
    sliding = config.get("use_sliding_window", model_type == "mistral")
    if seq is not None and sliding and window is not None:
        if isinstance(window, bool) or not isinstance(window, int) or window < seq:
            raise UsageError(f"{where}: field 'sliding_window' is {window!r}, shorter than --seq {seq}; the "
                             "package models full causal attention")
    return DecoderConfig(name, layers=layers, d_model=d_model, heads=heads, kv_heads=kv_heads, mlp_dim=mlp_dim,
                         vocab=vocab, tied_embeddings=tied, rope_theta=float(theta), source=where)


def default_budget(name: str) -> int:
    """The memory one device may use: on a TPU chip its usable HBM (at most its published memory); 90% of a GPU's.

    A GPU's 10% is the margin autotuning can add on the device. The usable HBM of a TPU
    chip is read from XLA's TPU compiler (:func:`remat_guide.targets.usable_bytes`).

    Examples:
        >>> from remat_guide.cli import default_budget
        >>> default_budget("h100") / 2**30
        72.0
    """
    from remat_guide.targets import target, usable_bytes

    chosen = target(name)
    if chosen.platform == "tpu":
        return min(chosen.memory_bytes, usable_bytes(chosen))
    return chosen.memory_bytes * 9 // 10


# --- Parsing --------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line and the bad-input status."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


_FIT_EXAMPLES = """examples:
  remat-guide fit llama3-8b --target h100 --devices 8 --seq 4096
  remat-guide fit path/to/config.json --target tpu-v5p --devices 8 --global-batch 64
  remat-guide fit llama3-1b --target h100 --policies full,minimal --json

CONFIG is a Hugging Face config.json (Llama, Mistral or Qwen2) or a preset: {presets}.
The programs are compiled ahead of time for the target by XLA's compilers (no device is
needed or used): the figures are the compiler's plan, not a run. Exit status: 0 a policy
fits, 1 none fits, 2 bad input. Compiled figures are kept in {cache}
(REMAT_GUIDE_CACHE_DIR overrides it); run from a clone, the site's figure store
(docs/_figures) is read first (REMAT_GUIDE_FIGURES overrides it)."""

_COMPARE_EXAMPLES = """examples:
  remat-guide compare my_model:measure --target h100
  remat-guide compare train.py:measure --target tpu-v5e --policies dots_saveable

FUNCTION takes no arguments and returns (step_for, args) or (loss_for, args): step_for(policy)
or loss_for(policy) builds the training step or the loss checkpointed with that policy (no
checkpoint for None), and args are its arguments (jax.ShapeDtypeStruct values are enough).
A function whose output is a scalar is a loss; anything else is a training step
(params, opt_state, batch -> params, opt_state, loss). The table is compare_policies's."""


def _parser() -> argparse.ArgumentParser:
    from_cache = _cache_folder()
    parser = _Parser(prog="remat-guide", description="Which jax.checkpoint policy, at what batch, how fast, on "
                     "which accelerator: compiled ahead of time by XLA's compilers, no device needed.",
                     epilog="run 'remat-guide COMMAND --help' for a command's options and examples")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    def common(sub: argparse.ArgumentParser, policies: str) -> None:
        sub.add_argument("--target", required=True, metavar="NAME",
                         help="the accelerator to compile for (see 'remat-guide targets')")
        sub.add_argument("--policies", metavar="A,B,...", help=policies)
        sub.add_argument("--budget", type=float, metavar="GIB", help="memory per device in GiB (default: 90%% of "
                         "a GPU's memory, a TPU chip's usable HBM)")
        sub.add_argument("--json", action="store_true", help="print the answer as JSON, for scripts")
        sub.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    fit = commands.add_parser("fit", help="the answer for a Hugging Face config.json or a preset",
                              description="Compare checkpoint policies on a decoder's training step: per policy "
                              "the memory per device, whether it fits, the largest batch, the estimated step time "
                              "and tokens per second; then the pick and where its memory goes.",
                              epilog=_FIT_EXAMPLES.format(presets=", ".join(PRESETS), cache=from_cache),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    fit.add_argument("config", metavar="CONFIG", help="a config.json file, or a preset name")
    common(fit, "policies to compare, MaxText's names (full, minimal, save_qkv_proj, save_dot_except_mlp, "
           "qkv_proj_offloaded, ...) or jax.checkpoint_policies' (dots_saveable, ...); no checkpoint is always "
           f"compared (default: {','.join(DEFAULT_POLICIES)})")
    fit.add_argument("--devices", type=int, default=1, metavar="N", help="devices the step runs on (default 1)")
    fit.add_argument("--mesh", metavar="AXIS=N,...", help="how the devices are split: data, fsdp and tensor axes "
                     "(default fsdp=DEVICES); the batch is split over data and fsdp")
    fit.add_argument("--seq", type=int, default=4096, metavar="TOKENS", help="tokens per sequence (default 4096)")
    batch = fit.add_mutually_exclusive_group()
    batch.add_argument("--batch", type=int, metavar="N", help="sequences per batch shard (the global batch is N "
                       "times data x fsdp); default: search each policy's largest batch")
    batch.add_argument("--global-batch", type=int, metavar="N", help="sequences per step over all devices")
    fit.add_argument("--attention", default="fused", metavar="KIND", help="fused (the kernel training runs: "
                     "splash on a TPU, Pallas's Triton kernel on a GPU; the default) or xla (plain softmax)")
    fit.add_argument("--optimizer", default="adamw", metavar="NAME",
                     help=f"{', '.join(_OPTIMIZERS)} (default adamw, as Llama 3 was trained)")
    fit.add_argument("--dtype", default="f32", metavar="DTYPE", help="the parameters' dtype: f32 (master weights, "
                     "the default) or bf16; matmuls run in bf16 either way")

    compare = commands.add_parser("compare", help="the table for your own training step or loss",
                                  description="Compare checkpoint policies on your own code, as compare_policies "
                                  "does, compiled for an accelerator.", epilog=_COMPARE_EXAMPLES,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    compare.add_argument("function", metavar="MODULE:FUNCTION", help="a module (dotted name, or a .py file) and "
                         "the function in it that returns (step_for or loss_for, args)")
    common(compare, "names from jax.checkpoint_policies or MaxText's (default: compare_policies's)")
    compare.add_argument("--devices", type=int, default=1, metavar="N",
                         help="CPU devices to give your code for its mesh (default 1)")

    targets = commands.add_parser("targets", help="the accelerators, their memory and published rates",
                                  description="The accelerators the programs are compiled for, their memory and "
                                  "the published rates the step-time estimate divides by.")
    targets.add_argument("--json", action="store_true", help="print them as JSON")
    return parser


def _cache_folder() -> str:
    configured = os.environ.get("REMAT_GUIDE_CACHE_DIR", "")
    if configured:
        return configured
    import platformdirs

    return platformdirs.user_cache_dir("remat-guide")


def _clone_store() -> pathlib.Path | None:
    """The figure store of the clone this package runs from (an editable install), if there is one."""
    here = pathlib.Path(__file__).resolve().parent
    store = here.parent.parent / "docs" / "_figures"
    return store if (here.parent.name == "src" and store.is_dir()) else None


@contextlib.contextmanager
def _environment() -> Iterator[None]:
    """JAX on the CPU, the user's cache and a clone's figure store, for the command; as they were after it."""
    names = ("REMAT_GUIDE_CACHE_DIR", "REMAT_GUIDE_FIGURES")
    saved = {name: os.environ.get(name) for name in names}
    if "JAX_PLATFORMS" not in os.environ:
        # The accelerators' compilers describe their devices only when JAX runs on the CPU;
        # importing the package imported JAX already, which reads its platforms when it starts.
        os.environ["JAX_PLATFORMS"] = "cpu"
        import jax

        with contextlib.suppress(Exception):
            jax.config.update("jax_platforms", "cpu")
    os.environ["REMAT_GUIDE_CACHE_DIR"] = _cache_folder()
    store = _clone_store()
    if not os.environ.get("REMAT_GUIDE_FIGURES") and store is not None:
        os.environ["REMAT_GUIDE_FIGURES"] = str(store)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _cpu_devices(devices: int) -> None:
    """Gives JAX ``devices`` CPU devices to build the mesh on, before it starts."""
    import jax

    if jax.config.jax_num_cpu_devices < devices:
        try:
            jax.config.update("jax_num_cpu_devices", devices)
        except RuntimeError:
            pass  # JAX started already (a notebook's kernel): its devices are checked below
    have = len(jax.devices("cpu"))
    if have < devices:
        raise UsageError(f"--devices: this process has {have} CPU devices to build the mesh on and JAX has started; "
                         f"run the command in a new process")


def _count(value: int | None, flag: str) -> int | None:
    if value is not None and value <= 0:
        raise UsageError(f"{flag}: must be a positive integer, got {value}")
    return value


def _target(name: str) -> Any:
    from remat_guide.targets import TARGETS

    if name not in TARGETS:
        raise UsageError(f"--target: unknown target {name!r}; the known targets are {', '.join(TARGETS)}")
    return TARGETS[name]


def _budget(options: argparse.Namespace) -> int:
    if options.budget is None:
        return default_budget(options.target)
    if not options.budget > 0 or math.isinf(options.budget):
        raise UsageError(f"--budget: must be a positive number of GiB, got {options.budget}")
    return int(options.budget * 2**30)


def _policies(text: str | None, default: Sequence[str] | None) -> dict[str, Any] | None:
    """``--policies`` as ``{label: policy}``: MaxText's presets by name, ``jax.checkpoint_policies``' others."""
    from remat_guide._measure import standard_policy
    from remat_guide.models import MAXTEXT_PRESETS

    names = list(default) if text is None else [name.strip() for name in text.split(",") if name.strip()]
    if text is not None and not names:
        raise UsageError("--policies: give at least one policy name")
    if default is None and text is None:
        return None
    chosen = {}
    for name in names:
        if name in chosen:
            raise UsageError(f"--policies: {name!r} is given twice")
        if name in MAXTEXT_PRESETS:
            chosen[name] = MAXTEXT_PRESETS[name]
            continue
        try:
            chosen[name] = standard_policy(name)
        except ValueError:
            raise UsageError(f"--policies: unknown policy {name!r}; MaxText's are {', '.join(MAXTEXT_PRESETS)}, "
                             "and jax.checkpoint_policies' that take no arguments (dots_saveable, ...)") from None
    return chosen


def _mesh_sizes(options: argparse.Namespace) -> dict[str, int]:
    devices = options.devices
    if options.mesh is None:
        return {"fsdp": devices, "tensor": 1}
    sizes: dict[str, int] = {}
    for part in options.mesh.split(","):
        axis, _, size = part.partition("=")
        axis = axis.strip()
        if axis not in _MESH_AXES:
            raise UsageError(f"--mesh: unknown axis {axis!r}; the axes are {', '.join(_MESH_AXES)}")
        if axis in sizes:
            raise UsageError(f"--mesh: axis {axis!r} is given twice")
        if not size.strip().isdigit() or int(size) <= 0:
            raise UsageError(f"--mesh: {axis} must be a positive integer, as in fsdp=8, got {part.strip()!r}")
        sizes[axis] = int(size)
    if math.prod(sizes.values()) != devices:
        raise UsageError(f"--mesh: {options.mesh} has {math.prod(sizes.values())} devices, --devices {devices}")
    if "fsdp" not in sizes:
        sizes["fsdp"] = 1
    if "tensor" not in sizes:
        sizes["tensor"] = 1
    return {axis: sizes[axis] for axis in _MESH_AXES if axis in sizes}


# --- Progress ------------------------------------------------------------------------------------


class _Progress:
    """A progress bar on stderr over the policies, naming the program being compiled; silent off a terminal."""

    def __init__(self, enabled: bool) -> None:
        self._bar: Any = None
        self._task: Any = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True),
                                 transient=True)

    @contextlib.contextmanager
    def running(self, total: int, description: str) -> Iterator[_Progress]:
        if self._bar is None:
            yield self
            return
        with self._bar:
            self._task = self._bar.add_task(description, total=total)
            yield self

    def describe(self, description: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=description)

    def advance(self) -> None:
        if self._bar is not None:
            self._bar.advance(self._task)


# --- fit -----------------------------------------------------------------------------------------


def _decoder(options: argparse.Namespace) -> Any:
    from remat_guide.models import LLAMA3

    if options.config in PRESETS:
        return LLAMA3[PRESETS[options.config]]
    if not pathlib.Path(options.config).exists() and "/" not in options.config and not options.config.endswith(
            ".json"):
        raise UsageError(f"CONFIG: {options.config!r} is neither a file nor a preset ({', '.join(PRESETS)})")
    return read_config(options.config, options.seq)


def _fit_request(options: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """The checked request, as JSON values (the answer's cache key), and the decoder's sizes."""
    chosen = _target(options.target)
    for flag, value in (("--devices", options.devices), ("--seq", options.seq), ("--batch", options.batch),
                        ("--global-batch", options.global_batch)):
        _count(value, flag)
    config = _decoder(options)
    if options.attention not in ("fused", "xla"):
        raise UsageError(f"--attention: must be fused or xla, got {options.attention!r}")
    if options.optimizer not in _OPTIMIZERS:
        raise UsageError(f"--optimizer: must be one of {', '.join(_OPTIMIZERS)}, got {options.optimizer!r}")
    if options.dtype not in _DTYPES:
        raise UsageError(f"--dtype: must be f32 or bf16, got {options.dtype!r}")
    mesh = _mesh_sizes(options)
    shards = mesh.get("data", 1) * mesh["fsdp"]
    global_batch = options.global_batch if options.batch is None else options.batch * shards
    if global_batch is not None and global_batch % shards:
        raise UsageError(f"--global-batch: {global_batch} is not a multiple of the {shards} shards the batch is "
                         "split over (data x fsdp)")
    for field, size, axis in (("num_key_value_heads", config.kv_heads, "tensor"),
                              ("num_attention_heads", config.heads, "tensor"),
                              ("hidden_size", config.d_model, "fsdp")):
        if size % mesh[axis]:
            raise UsageError(f"--mesh: {axis}={mesh[axis]} does not divide the config's {field} ({size})")
    names = list(_policies(options.policies, DEFAULT_POLICIES))
    sizes = {"name": config.name, "layers": config.layers, "d_model": config.d_model, "heads": config.heads,
             "kv_heads": config.kv_heads, "mlp_dim": config.mlp_dim, "vocab": config.vocab,
             "tied_embeddings": config.tied_embeddings, "rope_theta": config.rope_theta}
    request = {"model": sizes, "target": chosen.name, "devices": options.devices, "mesh": mesh, "seq": options.seq,
               "global_batch": global_batch, "policies": names, "attention": options.attention,
               "optimizer": options.optimizer, "dtype": _DTYPES[options.dtype], "budget_bytes": _budget(options)}
    return request, config


def _fit_answer(request: dict[str, Any], config: Any, progress: _Progress) -> dict[str, Any]:
    """The answer to a ``fit`` request, as JSON values: compiles (or reads) every program it needs."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from remat_guide.compare import compare_policies
    from remat_guide.fit import recommend_batch
    from remat_guide.models import decoder_args, decoder_step
    from remat_guide.targets import target

    chosen = target(request["target"])
    sizes = request["mesh"]
    devices = request["devices"]
    mesh = None if devices == 1 else jax.sharding.Mesh(
        np.array(jax.devices("cpu")[:devices]).reshape(tuple(sizes.values())), tuple(sizes))
    optimizer = _optimizer(request["optimizer"])
    dtype = jnp.dtype(request["dtype"])
    seq, attention = request["seq"], request["attention"]
    shards = sizes.get("data", 1) * sizes["fsdp"]
    policies = _policies(",".join(request["policies"]), None)
    labels = {id(policy): label for label, policy in policies.items()}
    budget = request["budget_bytes"]
    global_batch = request["global_batch"]
    base = global_batch or shards
    current: dict[str, Any] = {"label": None, "compiles": 0}

    def args_for(batch: int) -> tuple:
        current["batch"] = batch
        return decoder_args(config, batch, seq, mesh=mesh, param_dtype=dtype, optimizer=optimizer)

    def step_for(policy: Any) -> Any:
        label = "no checkpoint" if policy is None else labels.get(id(policy), "?")
        if current["label"] is not None and label != current["label"]:
            progress.advance()
        current["label"] = label
        current["compiles"] += 1
        progress.describe(f"{label}: batch {current.get('batch', base)}")
        return decoder_step(config, policy, mesh, optimizer, attention=attention)

    with progress.running(len(policies) + 2, f"compiling for {chosen.name}"):
        progress.describe(f"{len(policies) + 1} programs at batch {base} (FLOPs on this CPU)")
        rows = compare_policies(lambda policy: decoder_step(config, policy, mesh, optimizer, attention=attention),
                                *args_for(base), step=True, target=chosen.name, policies=policies)
        progress.advance()
        plan = recommend_batch(step_for, args_for, policies=policies, target=chosen.name, tokens_per_example=seq,
                               budget_bytes=budget, multiple=shards, limit=64 * shards, global_batch=global_batch)
        progress.advance()
        progress.describe("where the pick's memory goes")
        memory = None if plan.pick is None else _memory_of(plan.pick, config, mesh, optimizer, attention, seq,
                                                           args_for, chosen.name, sizes)
    by_label = {row.name: row for row in rows}
    table = []
    for found in plan.rows:
        row = by_label[found.name]
        table.append({
            "policy": found.name, "batch": found.batch, "device_bytes": found.device_bytes,
            "fits": bool(found.batch), "step_seconds": found.step_seconds,
            "tokens_per_second": found.tokens_per_second,
            # Every device's FLOPs over the tokens of the batch they were counted at.
            "flops_per_token": row.flops * devices / (base * seq),
            "host_bytes": row.host_bytes,
        })
    pick = None if plan.pick is None else {
        "policy": plan.pick.name, "global_batch": plan.pick.batch, "tokens_per_second": plan.pick.tokens_per_second,
        "step_seconds": plan.pick.step_seconds, "device_bytes": plan.pick.device_bytes}
    return {"command": "fit", "request": request, "model": config.name, "source": config.source,
            "parameters": config.parameters, "compiler": chosen.compiler, "memory_bytes": chosen.memory_bytes,
            "flops_batch": base, "rows": table, "pick": pick, "basis": plan.basis, "memory": memory,
            "figures": "the compiler's plan, compiled ahead of time: not a run"}


def _optimizer(name: str) -> Any:
    """The optimizer called ``name``; AdamW as ``None``, so that the step is the fit page's own."""
    if name == "adamw":
        return None
    import optax

    return {"adafactor": optax.adafactor(3e-4), "sgd": optax.sgd(3e-4)}[name]


def _memory_of(pick: Any, config: Any, mesh: Any, optimizer: Any, attention: str, seq: int,
               args_for: Callable[[int], tuple], target_name: str, sizes: Mapping[str, int]) -> list[dict[str, Any]]:
    """Where the pick's memory goes on one device, at its batch (see :func:`remat_guide.fit.step_memory`)."""
    from remat_guide._measure import check_inputs, target_memory
    from remat_guide.compare import PolicyRow
    from remat_guide.fit import step_memory
    from remat_guide.models import decoder_loss, decoder_step

    args = args_for(pick.batch)
    inputs = check_inputs(tuple(args), 0, None, False, target_name, True, None)
    figures, refusal, seconds = target_memory(
        lambda policy: decoder_step(config, policy, mesh, optimizer, attention=attention), pick.policy, inputs)
    if figures is None:
        return []
    row = PolicyRow(pick.name, pick.policy, None, figures["temp_size_in_bytes"], 0, 0, 0.0, mesh is not None,
                    peak_bytes=figures["peak_memory_in_bytes"], host_bytes=figures["host_temp_size_in_bytes"],
                    target=target_name, argument_bytes=figures["argument_size_in_bytes"],
                    output_bytes=figures["output_size_in_bytes"], alias_bytes=figures["alias_size_in_bytes"],
                    step_seconds=seconds)
    tokens = pick.batch // (sizes.get("data", 1) * sizes["fsdp"]) * seq
    logits = "logits (float32)"
    # The kernels lower only for their accelerator: their blockwise stand-in, which keeps what
    # they keep, lists the residuals (XLA's plain attention lists its own).
    listed = "blockwise" if attention == "fused" else attention
    breakdown = step_memory(row, decoder_loss(config, pick.policy, mesh, listed), *args,
                            also={logits: tokens * config.vocab * 4 // sizes["tensor"]})
    parts: dict[str, list[Any]] = {}
    for part, nbytes, counted in breakdown.parts:
        parts.setdefault(_part_name(part), [0, counted])[0] += nbytes
    if "residual logits" in parts and logits in parts:  # kept as a residual: not part of the rest
        rest = next(part for part in parts if part.startswith("rest of temp"))
        parts[rest][0] += parts.pop(logits)[0]
    return [{"part": part, "bytes": nbytes, "counted_in": counted} for part, (nbytes, counted) in parts.items()]


def _part_name(part: str) -> str:
    """A residual named by what it is: a matmul's output by the ``checkpoint_name`` tag on its line of the model."""
    import inspect
    import re

    from remat_guide import models

    if part == "residual carry":
        return "residual: each block's input"
    if not part.startswith("residual ") or " at " not in part:
        return part
    primitive, where = part[len("residual "):].rsplit(" at ", 1)
    if primitive == "sharding_constraint":  # the sharded block's input, constrained to its batch sharding
        return "residual: each block's input"
    file, _, number = where.partition(":")
    if primitive == "dot_general" and file == "models.py" and number.isdigit():
        lines, _ = inspect.getsourcelines(models)
        statement = "".join(lines[int(number) - 1:int(number) + 1])
        tag = re.search(r'checkpoint_name\((?:.|\n)*?"(\w+)"\)', statement)
        if tag:
            return f"residual {tag.group(1)}"
    return "other residuals"


# --- compare -------------------------------------------------------------------------------------


def _user_function(spec: str) -> Callable[[], Any]:
    module_name, _, function_name = spec.rpartition(":")
    if not module_name or not function_name:
        raise UsageError(f"MODULE:FUNCTION: expected a module and a function, as my_model:measure, got {spec!r}")
    try:
        if module_name.endswith(".py"):
            path = pathlib.Path(module_name)
            if not path.is_file():
                raise UsageError(f"MODULE:FUNCTION: no such file {module_name!r}")
            loader = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(loader)  # type: ignore[arg-type]
            sys.path.insert(0, str(path.resolve().parent))
            loader.loader.exec_module(module)  # type: ignore[union-attr]
        else:
            sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise UsageError(f"MODULE:FUNCTION: cannot import {module_name!r} ({error})") from None
    except UsageError:
        raise
    except Exception as error:
        raise UsageError(f"MODULE:FUNCTION: importing {module_name!r} raised {type(error).__name__}: "
                         f"{_first_line(error)}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise UsageError(f"MODULE:FUNCTION: {module_name!r} has no function {function_name!r}")
    return function


def _compare(options: argparse.Namespace, progress: _Progress) -> tuple[dict[str, Any], Any]:
    import jax

    from remat_guide.compare import compare_policies, recommend_policy

    chosen = _target(options.target)
    _count(options.devices, "--devices")
    budget = _budget(options)
    policies = _policies(options.policies, None)
    _cpu_devices(options.devices)
    function = _user_function(options.function)
    try:
        returned = function()
    except Exception as error:
        raise UsageError(f"MODULE:FUNCTION: {options.function}() raised {type(error).__name__}: "
                         f"{_first_line(error)}") from None
    if not (isinstance(returned, (tuple, list)) and len(returned) == 2 and callable(returned[0])
            and isinstance(returned[1], (tuple, list))):
        raise UsageError(f"MODULE:FUNCTION: {options.function}() must return (step_for or loss_for, args), args a "
                         f"tuple; got {type(returned).__name__}")
    make, args = returned[0], tuple(returned[1])
    try:
        out = jax.eval_shape(make(None), *args)
    except Exception as error:
        raise UsageError(f"MODULE:FUNCTION: {options.function}'s function, called with None and its args, raised "
                         f"{type(error).__name__}: {_first_line(error)}") from None
    step = getattr(out, "shape", None) != ()
    with progress.running(1, f"compiling for {chosen.name}"):
        progress.describe(f"compiling every policy for {chosen.name} and this CPU")
        rows = compare_policies(make, *args, policies=policies, target=chosen.name, step=step)
        progress.advance()
    try:
        pick = recommend_policy(rows=rows, budget_bytes=budget)
    except ValueError:
        pick = None
    answer = {
        "command": "compare", "function": options.function, "target": chosen.name, "step": step,
        "budget_bytes": budget, "compiler": chosen.compiler,
        "rows": [{"policy": row.name, "device_bytes": row.device_bytes, "fits": row.device_bytes <= budget
                  and not row.refused, "temp_bytes": row.temp_bytes, "host_bytes": row.host_bytes,
                  "flops": row.flops, "step_seconds": row.step_seconds, "residual_bytes": row.residual_bytes}
                 for row in rows],
        "pick": None if pick is None else {"policy": pick.name, "device_bytes": pick.device_bytes,
                                           "step_seconds": pick.step_seconds},
        "figures": "the compiler's plan, compiled ahead of time: not a run",
    }
    return answer, rows


# --- Printing ------------------------------------------------------------------------------------


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def _rate(tokens: float | None) -> str:
    if tokens is None:
        return "–"
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if tokens >= size:
            return f"{tokens / size:.1f} {unit}"
    return f"{tokens:.0f}"


def _milliseconds(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:,.0f}"


def _flops(flops: float) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if flops >= size:
            return f"{flops / size:.2f} {unit}"
    return f"{flops:.0f}"


def _columns(header: Sequence[str], lines: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """Plain-text columns: the first ``left`` ones flush left, the others right."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *lines)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) if i < left else cell.rjust(width)
                         for i, (cell, width) in enumerate(zip(cells, widths))).rstrip()

    return [line(header), "  ".join("-" * width for width in widths), *map(line, lines)]


def _describe_attention(attention: str, platform: str) -> str:
    if attention == "xla":
        return "XLA's plain attention"
    kernel = "Pallas's splash kernel" if platform == "tpu" else "Pallas's Triton flash kernel"
    return f"fused attention ({kernel})"


def _fit_text(answer: dict[str, Any]) -> str:
    from remat_guide.targets import target

    request = answer["request"]
    chosen = target(request["target"])
    mesh = ", ".join(f"{axis}={size}" for axis, size in request["mesh"].items())
    devices = request["devices"]
    kind = chosen.name.upper() if chosen.platform == "cuda" else chosen.device_kind + " chip"
    lines = [
        f"{answer['model']}: {answer['parameters'] / 1e9:.2f} B parameters",
        f"on {devices} x {kind} ({mesh}), {request['seq']:,} tokens a sequence,",
        f"{_describe_attention(request['attention'], chosen.platform)}, {request['optimizer']}, "
        f"{request['dtype']} parameters",
        f"budget {_gib(request['budget_bytes'])} of {_gib(answer['memory_bytes'])} per device",
        "",
    ]
    searched = request["global_batch"] is None
    estimated = any(row["step_seconds"] is not None for row in answer["rows"])
    header = ["policy", "memory", "fits", "batch" if searched else "g. batch"]
    if estimated:
        header += ["est. step (ms)", "tokens/s"]
    header.append("FLOPs/tok")
    table = []
    for row in answer["rows"]:
        cells = [row["policy"], _gib(row["device_bytes"]), "yes" if row["fits"] else "no",
                 str(row["batch"]) if row["fits"] else "–"]
        if estimated:
            cells += [_milliseconds(row["step_seconds"]), _rate(row["tokens_per_second"])]
        cells.append(_flops(row["flops_per_token"]))
        table.append(cells)
    lines += _columns(header, table)
    lines += ["", "memory: per device, at " + ("each policy's largest global batch that fits (where none fits,"
                                            "\n  at the smallest)" if searched else "the global batch asked for"),
              "FLOPs/tok: all devices' FLOPs per token, counted on this CPU (the kernel's stand-in)",
              f"  at a global batch of {answer['flops_batch']}", ""]
    pick = answer["pick"]
    if pick is None:
        lines.append("No policy fits the budget" + ("." if searched else f" at a global batch of "
                                                                          f"{request['global_batch']}."))
    else:
        rate = "" if pick["tokens_per_second"] is None else f", {_rate(pick['tokens_per_second'])} tokens/s by estimate"
        lines += [f"Pick: {pick['policy']} at a global batch of {pick['global_batch']}{rate}",
                  f"({answer['basis']}).", ""]
        lines += [f"Where {pick['policy']}'s memory goes, per device, at a global batch of {pick['global_batch']}:"]
        lines += _columns(["part", "GiB"], [[part["part"], f"{part['bytes'] / 2**30:.2f}"]
                                            for part in answer["memory"]])
    lines += ["", f"Figures: the plan of {chosen.compiler},", "compiled ahead of time: not a run."]
    return "\n".join(lines)


def _compare_text(answer: dict[str, Any], rows: Any) -> str:
    lines = [str(rows), "", f"budget {_gib(answer['budget_bytes'])} per device on {answer['target']}: fits "
             + ", ".join(f"{row['policy']} {'yes' if row['fits'] else 'no'}" for row in answer["rows"])]
    from remat_guide.targets import target

    pick = answer["pick"]
    timed = pick is not None and pick["step_seconds"] is not None and target(answer["target"]).ranks_by_time
    least = "the least estimated step time" if timed else "the fewest FLOPs"
    lines.append("No policy fits the budget." if pick is None else
                 f"Pick: {pick['policy']} ({least} of those that fit).")
    lines += [f"Figures: the plan of {answer['compiler']},", "compiled ahead of time: not a run."]
    return "\n".join(lines)


def _targets(as_json: bool) -> str:
    from remat_guide.targets import TARGETS

    listed = []
    for chosen in TARGETS.values():
        hardware = chosen.hardware
        listed.append({
            "name": chosen.name, "device": chosen.device_kind, "memory_bytes": chosen.memory_bytes,
            "bf16_flops": None if hardware is None else hardware.matmul_flops["bf16"],
            "memory_bandwidth": None if hardware is None else hardware.memory_bandwidth,
            "host_bandwidth": None if hardware is None else hardware.host_bandwidth,
            "source": None if hardware is None else hardware.source,
        })
    if as_json:
        return json.dumps(listed, indent=2)
    table = [[t["name"], t["device"], f"{t['memory_bytes'] / 2**30:.0f}",
              "–" if t["bf16_flops"] is None else f"{t['bf16_flops'] / 1e12:,.0f}",
              "–" if t["memory_bandwidth"] is None else f"{t['memory_bandwidth'] / 1e9:,.0f}",
              "–" if t["host_bandwidth"] is None else f"{t['host_bandwidth'] / 1e9:,.0f}"] for t in listed]
    lines = _columns(["target", "device", "GiB", "bf16 TFLOP/s", "HBM GB/s", "host GB/s"], table, left=2)
    lines += ["", "Rates: dense bf16 matmuls, device memory, host link each way, from the makers' datasheets; the",
              "step-time estimate assumes 70%, 90% and 82.5% of them. TPUs: the estimate is shown but not ranked",
              "on (no TPU run has checked it); the pick is the largest batch. Google publishes no host-link rate."]
    return "\n".join(lines)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# --- main ----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command with ``argv`` (the process's arguments when ``None``); returns its exit status.

    Prints the answer on stdout, a progress bar on stderr (at a terminal), and bad input
    as one line on stderr naming the flag or the config field.

    Returns:
        :data:`FITS` (0) when a policy fits (or the targets were listed),
        :data:`NOTHING_FITS` (1) when none does, :data:`BAD_INPUT` (2) for bad input (or
        a failure, such as a compiler that is not installed).

    Examples:
        >>> from remat_guide.cli import main
        >>> main(["targets"])
        target ...
        0
    """
    try:
        options = _parser().parse_args(argv)
        if options.command == "targets":
            print(_targets(options.json))
            return FITS
        progress = _Progress(not options.no_progress)
        with _environment():
            if options.command == "compare":
                answer, rows = _compare(options, progress)
                print(json.dumps(answer, indent=2) if options.json else _compare_text(answer, rows))
                return FITS if answer["pick"] is not None else NOTHING_FITS
            request, config = _fit_request(options)
            _cpu_devices(request["devices"])
            from remat_guide import _cache as cache

            answer = cache.cached("fit", request, lambda: _fit_answer(request, config, progress))
        print(json.dumps(answer, indent=2) if options.json else _fit_text(answer))
        return FITS if answer["pick"] is not None else NOTHING_FITS
    except UsageError as error:
        print(f"remat-guide: error: {error}", file=sys.stderr)
        return BAD_INPUT
    except ImportError as error:
        print(f"remat-guide: error: {_first_line(error)}", file=sys.stderr)
        return BAD_INPUT
    except (TypeError, ValueError) as error:
        print(f"remat-guide: error: {_first_line(error)}", file=sys.stderr)
        return BAD_INPUT
    except Exception as error:  # a failure of JAX or a compiler: its first line, never a traceback
        print(f"remat-guide: error: {type(error).__name__}: {_first_line(error)}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        print("remat-guide: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """The console script: :func:`main` with the process's arguments, its status as the exit status."""
    sys.exit(main())
