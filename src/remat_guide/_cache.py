"""Compiling a program only to read its figures: quickly, from the figure store, or kept on disk in a cache."""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import pathlib
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import jax

from remat_guide import _jax_internals as jax_internals
from remat_guide import _roofline as roofline
from remat_guide import _store as store
from remat_guide.flops import count_flops

__all__ = ["ENVIRONMENT_VARIABLE", "cached", "captured_stderr", "compile_entry", "compile_unrun", "compiler_version",
           "cpu_figures", "figures", "instruction_counts", "target_figures", "unrun_options"]

ENVIRONMENT_VARIABLE = "REMAT_GUIDE_CACHE_DIR"


def unrun_options(platform: str | None = None) -> dict[str, Any]:
    """The compile options of a program that is measured, never run (see :func:`compile_unrun`)."""
    platform = platform or jax.default_backend()
    if platform == "cpu":
        return {"xla_backend_optimization_level": 0}
    if platform == "cuda":
        return {"xla_gpu_autotune_level": 0}
    return {}


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
    options = unrun_options(platform)
    return lowered.compile(compiler_options=options) if options else lowered.compile()


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
    store.write_json(folder / cache_key[:2] / f"{cache_key}.json", figures)


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


def stored(kind: str, compiler: str, lowered: Any) -> Any:
    """A lowered program's figures of one ``kind`` for one ``compiler`` when the cache has them, else ``None``."""
    return _get(_key(kind, compiler, lowered))


def cached(kind: str, parts: Any, compute: Callable[[], Any]) -> Any:
    """A result of ``compute()`` kept in the cache under ``kind`` and ``parts``, or read back from it.

    For results that follow from compiled programs without being one (the command line's
    answers, the site's searches). The key covers ``parts`` (JSON-serialisable), the XLA
    flags, the versions of JAX, jaxlib and the accelerators' compilers installed, this
    package's source and whether a figure store is read. Without a cache
    (``REMAT_GUIDE_CACHE_DIR`` unset), ``compute()`` runs each time. Computed or read back,
    the result is what JSON gives back (lists for tuples), so that callers get the same either way.

    The figure store's entries that ``compute()`` looked up are kept with its result, and a
    build (``REMAT_GUIDE_FIGURES_LOG``) that reads the result back records them as read, as
    computing it would have: ``make figures`` keeps what a build with an empty cache reads.
    A result one of whose entries is neither in the store nor compiled in this build is
    computed again, so that the miss is recorded.
    """
    if _folder() is None:
        return json.loads(json.dumps(compute()))
    compilers = [f"{name} {_installed(name)}" for name in ("libtpu", "jax-cuda12-plugin")]
    text = "\0".join([kind, os.environ.get("XLA_FLAGS", ""), _code_version(), *compilers,
                      str(store.store_folder() is not None), json.dumps(parts, sort_keys=True)])
    cache_key = hashlib.sha256(text.encode()).hexdigest()
    found = _get(cache_key)
    if isinstance(found, dict) and "value" in found and _replayed(found.get("reads", [])):
        return found["value"]
    with store.recording() as reads:
        value = json.loads(json.dumps(compute()))
    _put(cache_key, {"value": value, "reads": sorted(reads)})
    return value


def _replayed(keys: list[str]) -> bool:
    """Records the reads of entries ``keys`` as looking them up would; ``False``, recording nothing, if one is missing.

    They go to a build's log, and to each :func:`store.recording` under way (a kept result
    read back while another is computed is part of what the other rests on).
    """
    build_log, folder = store.log(), store.store_folder()
    if build_log is not None and folder is not None:
        held = store.load(folder) if folder.is_dir() else {}
        if any(key not in held and build_log.find_missed(key) is None for key in keys):
            return False
        who = _reader()
        for key in keys:
            build_log.read(key, who)
    for key in keys:
        store.looked_up(key)
    return True


def _installed(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def compiler_version(platform: str) -> str:
    """The packages, with their versions, whose compiler compiles for ``platform`` (``"tpu"``, ``"cuda"``, ``"cpu"``).

    For this machine's CPU, also its architecture (``x86_64``, ``arm64``): XLA's CPU compiler
    compiles for the host it runs on.
    """
    plugin = {"tpu": "libtpu", "cuda": "jax-cuda12-plugin"}.get(platform)
    packages = ["jaxlib"] + ([plugin] if plugin else [])
    version = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in packages)
    if platform == "cpu":
        version += f", {os.uname().machine}"
    rehearsal = os.environ.get(store.REHEARSAL_VARIABLE, "")
    return f"{version}, rehearsal {rehearsal}" if rehearsal else version


_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%\S+ = .*? ([a-z][\w-]*)\(", re.MULTILINE)
# The prefix of a line of XLA's C++ log: severity, date, time, thread and source line.
_LOG_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\] ")


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Keeps what C++ code writes to the process's stderr during the block out of sight.

    Yields a list that holds that text once the block ends.
    """
    captured: list[str] = []
    with tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read().decode(errors="replace"))


def _log_lines(text: str) -> list[str]:
    """The lines of XLA's C++ log in ``text``, without their prefix."""
    return [_LOG_PREFIX.sub("", line) for line in text.splitlines() if _LOG_PREFIX.match(line)]


def _compile_figures(lowered: Any, options: dict[str, Any], log: bool = False,
                     platform: str = "") -> dict[str, Any]:
    """What XLA produced for a program: every ``memory_analysis()`` size, ``cost_analysis()``, its instructions.

    The program is compiled from its text without source locations (see
    ``remat_guide._jax_internals.compile_as_kept``), so the figures are those of the text the
    figure store keys and keeps.

    For a GPU or a TPU (``platform="cuda"`` or ``"tpu"``), also its kernels' matmul FLOPs
    and bytes, which the step-time estimate reads (see ``remat_guide._roofline.kernels``); for
    this machine's CPU (``"cpu"``), its FLOPs with every loop iteration counted. A program the
    compiler refuses gives its error message instead; with ``log``, the lines XLA logged
    while compiling are kept too (they never reach stderr).
    """
    return _figures_of(lambda: jax_internals.compile_as_kept(lowered, options), log, platform)


def _figures_of(compile_: Callable[[], Any], log: bool, platform: str) -> dict[str, Any]:
    figures: dict[str, Any] = {"memory": None, "cost": None, "instructions": None}
    # Always captured: XLA's TPU compiler logs warnings (it could not rematerialize enough)
    # that would otherwise reach a notebook's output on the first build only.
    with captured_stderr() as text:
        try:
            compiled = compile_()
        except jax.errors.JaxRuntimeError as error:
            figures["error"] = str(error)
    if log:
        figures["log"] = _log_lines(text[0])
    if "error" in figures:
        return figures
    memory = compiled.memory_analysis()
    figures["memory"] = {name: int(getattr(memory, name)) for name in dir(memory)
                         if not name.startswith("_") and isinstance(getattr(memory, name), int)}
    cost = compiled.cost_analysis()
    figures["cost"] = None if cost is None else {k: float(v) for k, v in sorted(cost.items())}
    text = compiled.as_text()
    figures["instructions"] = instruction_counts(text)
    if platform in ("cuda", "tpu"):
        figures["kernels"] = roofline.kernels(text, platform)
    if platform == "cpu":
        count = count_flops(compiled)
        figures["flops"] = {"total": count.total, "reported": count.reported}
    return figures


def compile_entry(entry: dict[str, Any], text: str, platform: str, devices: Any) -> dict[str, Any]:
    """A store entry's program compiled again from its kept text, by the installed compiler: the new entry.

    Args:
        entry: A store entry with its compile arguments (``entry["compile"]``).
        text: The lowered program the entry's key was made from.
        platform: The platform of the entry's target (``"tpu"``, ``"cuda"``).
        devices: The target's devices, among them those whose ids ``entry["compile"]`` lists.

    Returns:
        The entry, with the installed compiler, the key it has for that compiler and the
        figures it compiled to (an ``"error"`` where the compiler refused it).
    """
    compiler = compiler_version(platform)
    settings = dict(entry["options"])
    log = bool(settings.pop("log", False))
    flags = settings.pop("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    if flags != os.environ.get("XLA_FLAGS", ""):
        raise ValueError(f"entry {entry['key'][:16]} was compiled with XLA_FLAGS={flags!r}: compile it in a "
                         f"process started with them")
    remat_pass = settings.pop("jax_compiler_enable_remat_pass", True)
    counter = settings.pop("count_flops", None)
    if counter is not None and counter != _flops_code():
        raise ValueError(f"entry {entry['key'][:16]} counted its FLOPs with other code than the installed "
                         "remat_guide.flops: run `make html`, which compiles it again, then `make figures`")
    arguments = entry["compile"]
    saved = jax.config.jax_compiler_enable_remat_pass
    jax.config.update("jax_compiler_enable_remat_pass", remat_pass)
    try:
        figures = _figures_of(lambda: jax_internals.compile_text(text, devices, arguments, settings), log,
                              platform)
    finally:
        jax.config.update("jax_compiler_enable_remat_pass", saved)
    key = store.entry_key(entry["target"], compiler, entry["options"], text)
    return {**store.identity_of(entry), "key": key, "compiler": compiler, **figures}


def instruction_counts(text: str) -> dict[str, int]:
    """How many instructions of each opcode a compiled program's HLO text has, all computations included."""
    return dict(sorted(collections.Counter(_INSTRUCTION.findall(text)).items()))


@functools.cache
def _flops_code() -> str:
    """A digest of the module that derives a CPU entry's FLOPs from the compiled program."""
    return hashlib.sha256(pathlib.Path(sys.modules[count_flops.__module__].__file__).read_bytes()).hexdigest()[:16]


def _settings(options: dict[str, Any], platform: str = "") -> dict[str, Any]:
    """The compile options, with what else reaches the compiler: ``XLA_FLAGS`` and JAX's remat-pass flag.

    On the CPU, also a digest of the code that counts the FLOPs kept with the figures, so that
    a change to it compiles every CPU entry again instead of reading FLOPs it no longer gives.
    """
    settings = dict(options)
    if os.environ.get("XLA_FLAGS"):
        settings["XLA_FLAGS"] = os.environ["XLA_FLAGS"]
    if not jax.config.jax_compiler_enable_remat_pass:
        settings["jax_compiler_enable_remat_pass"] = False
    if platform == "cpu":
        settings["count_flops"] = _flops_code()
    return settings


def target_figures(lowered: Any, target: str, platform: str, options: dict[str, Any] | None = None,
                   log: bool = False) -> dict[str, Any]:
    """What a target's compiler produced for a lowered program: read from the figure store, or compiled.

    Returns ``{"memory": {...}, "cost": {...} or None, "instructions": {...}}``: every size
    of ``memory_analysis()``, ``cost_analysis()`` and the count of each HLO instruction of
    the compiled program; on a GPU or a TPU also ``"kernels"`` (see ``remat_guide._roofline``),
    on this machine's CPU (``platform="cpu"``, see :func:`cpu_figures`) also ``"flops"``.
    ``options`` are passed to ``lowered.compile``. With ``log``, also
    ``"log"``: the lines XLA's C++ code logged while compiling. A program the compiler
    refuses raises ``jax.errors.JaxRuntimeError`` with the compiler's message, as
    ``lowered.compile()`` does.

    With ``REMAT_GUIDE_FIGURES`` naming the store's folder (the site's build sets it), the
    store is read first, by the program's text, the target, the compiler's version and the
    options; a program it lacks is compiled and recorded in the build's log
    (``REMAT_GUIDE_FIGURES_LOG``) with its text and compile arguments, from which ``make
    figures`` adds it. Without a store, the figures are kept in the ``REMAT_GUIDE_CACHE_DIR``
    cache, if one is set.
    """
    options = dict(options or {})
    settings = _settings(options, platform)
    if log:
        settings["log"] = True
    folder = store.store_folder()
    if folder is None:
        kind = f"compiled {json.dumps(settings, sort_keys=True)}"
        return _raise_error(figures(kind, target, lowered,
                                   lambda: _compile_figures(lowered, options, log, platform)))
    text = lowered.as_text()
    compiler = compiler_version(platform)
    key = store.entry_key(target, compiler, settings, text)
    store.looked_up(key)
    build_log = store.log()
    who = _reader()
    entry = store.load(folder).get(key) if folder.is_dir() else None
    if entry is not None and store.outdated(entry, platform, text):
        entry = None  # kept before the store held all that is read of it: compiled again, as a miss
    in_store = entry is not None
    if entry is None and build_log is not None:
        entry = build_log.find_missed(key)
    if entry is None and build_log is None:
        # No build records the miss (a user's run, the command line): its figures are kept in
        # the cache, when one is set, so that the next run does not compile it again.
        kind = f"compiled {json.dumps(settings, sort_keys=True)}"
        return _raise_error(figures(kind, target, lowered,
                                   lambda: _compile_figures(lowered, options, log, platform)))
    if entry is None:
        entry = {"key": key, "target": target, "compiler": compiler, "options": settings,
                 "program": store.program_name(text), "compile": jax_internals.compile_arguments(lowered),
                 **_compile_figures(lowered, options, log, platform)}
        entry["check"] = store.digest(entry)
        if build_log is not None:
            build_log.missed({**entry, "where": who}, text)
    elif build_log is not None and in_store and ("compile" not in entry or not store.has_program(folder, key)):
        build_log.completed({**entry, "compile": jax_internals.compile_arguments(lowered), "where": who}, text)
    if build_log is not None:
        build_log.read(key, who)
    return _raise_error(store.figures_of(entry))


CPU = "cpu"
"""The figure store's name for this machine's CPU, as a target: the programs compiled here only to count them."""


def cpu_figures(lowered: Any) -> dict[str, Any]:
    """What XLA's CPU compiler produced for a program lowered for this machine, compiled without running it.

    As :func:`target_figures` gives a target's: ``memory``, ``cost`` and ``instructions``, and
    ``flops`` (``{"total": ..., "reported": ...}``, :func:`remat_guide.flops.count_flops`). The
    program is compiled from its text with :func:`compile_unrun`'s options (LLVM's
    optimizations off); a build reads the figure store first, as for an accelerator, under the
    target ``"cpu"`` and a compiler that names this machine's architecture.
    """
    return target_figures(lowered, CPU, "cpu", unrun_options("cpu"))


def _reader() -> str:
    """The page or test file a build's log names as reading the store (``REMAT_GUIDE_PAGE``), else ``"unnamed"``."""
    return os.environ.get(store.PAGE_VARIABLE, "") or "unnamed"


def cpu_entry_key(text: str) -> str:
    """The figure store's key of a program lowered for this machine, as :func:`cpu_figures` compiles it."""
    return store.entry_key(CPU, compiler_version("cpu"), _settings(unrun_options("cpu"), "cpu"), text)


def record_read(key: str | None) -> None:
    """Records in a build's log that it read the figure store's entry ``key``, when a build keeps a log and the store
    holds the entry.

    For figures that follow from an entry and that the cache answered from an earlier run: a
    build that starts with an empty cache reads the entry, so this one records it too.
    """
    build_log, folder = store.log(), store.store_folder()
    if key and folder is not None:
        store.looked_up(key)
    if key and build_log is not None and folder is not None and folder.is_dir() and key in store.load(folder):
        build_log.read(key, _reader())


def _raise_error(figures: dict[str, Any]) -> dict[str, Any]:
    if "error" in figures:
        raise jax.errors.JaxRuntimeError(figures["error"])
    return figures
