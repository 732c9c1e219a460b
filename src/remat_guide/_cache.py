"""Compiling a program only to read its figures: quickly, and kept on disk when REMAT_GUIDE_CACHE_DIR names a folder."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import pathlib
import tempfile
from collections.abc import Callable
from typing import Any

import jax

__all__ = ["ENVIRONMENT_VARIABLE", "compile_unrun", "figures"]

ENVIRONMENT_VARIABLE = "REMAT_GUIDE_CACHE_DIR"


def compile_unrun(lowered: Any, platform: str | None = None) -> Any:
    """``lowered.compile()`` for a program that is measured, never run.

    ``platform`` is that of the devices it was lowered for (``"tpu"``, ``"cuda"``);
    ``None`` for this machine's backend. On the CPU, LLVM's optimizations are turned off:
    they shape only the machine code, after XLA's HLO passes and buffer assignment, so the
    optimized HLO, its FLOPs and the memory figures are those of a default compile, in
    about a third of the time. On a GPU target, autotuning is turned off: ahead of time
    there is no device to time candidate kernels on, the device and host bytes are those
    of a default compile (the tests check it), and the compile takes about a quarter
    less time.
    """
    platform = platform or jax.default_backend()
    if platform == "cpu":
        return lowered.compile(compiler_options={"xla_backend_optimization_level": 0})
    if platform == "cuda":
        return lowered.compile(compiler_options={"xla_gpu_autotune_level": 0})
    return lowered.compile()


@functools.cache
def _code_version() -> str:
    """What the cached figures were computed with, besides the program: JAX, jaxlib and this package's code."""
    source = hashlib.sha256()
    for path in sorted(pathlib.Path(__file__).parent.rglob("*.py")):
        source.update(path.read_bytes())
    return f"{jax.__version__}/{importlib.metadata.version('jaxlib')}/{source.hexdigest()}"


def _folder() -> pathlib.Path | None:
    value = os.environ.get(ENVIRONMENT_VARIABLE, "")
    if not value:
        return None
    folder = pathlib.Path(value)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{ENVIRONMENT_VARIABLE} must name a folder (or nothing), got the file {value!r}")
    return folder


def _key(kind: str, compiler: str, lowered: Any) -> str | None:
    """The cache key of a lowered program's figures of one ``kind`` for one ``compiler``; ``None`` when no cache is set.

    The key covers the program's text, the compiler (``"cpu"`` or a target's name), the XLA
    flags, JAX's and jaxlib's versions and this package's source.
    """
    if _folder() is None:
        return None
    parts = [kind, compiler, os.environ.get("XLA_FLAGS", ""), _code_version(), lowered.as_text()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _get(cache_key: str | None) -> Any:
    """The figures stored under ``cache_key``, or ``None`` (no cache, or nothing readable stored)."""
    folder = _folder()
    if cache_key is None or folder is None:
        return None
    try:
        return json.loads((folder / cache_key[:2] / f"{cache_key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _put(cache_key: str | None, figures: Any) -> None:
    """Stores JSON-serialisable ``figures`` under ``cache_key``; several processes may write at once."""
    folder = _folder()
    if cache_key is None or folder is None:
        return
    path = folder / cache_key[:2] / f"{cache_key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp") as file:
        json.dump(figures, file)
    os.replace(file.name, path)


def figures(kind: str, compiler: str, lowered: Any, compute: Callable[[], Any]) -> Any:
    """A lowered program's figures of one ``kind`` for one ``compiler``, read from the cache or computed.

    ``compute()`` makes them when the cache has none (or none is set); they are kept when a
    cache is set. They must be JSON-serialisable, and read back, tuples come as lists.
    """
    cache_key = _key(kind, compiler, lowered)
    found = _get(cache_key)
    if found is None:
        found = compute()
        _put(cache_key, found)
    return found
