"""The figure store: what XLA's compilers (TPU, GPU, this machine's CPU) produced for each program, as JSON lines."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import lzma
import os
import pathlib
import re
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

from remat_guide import _roofline as roofline

__all__ = ["LOG_VARIABLE", "PAGE_VARIABLE", "PROGRAMS", "REHEARSAL_VARIABLE", "STORE_VARIABLE", "Log", "StoreError",
           "digest", "entry_key", "figures_of", "has_program", "identity_of", "load", "log", "looked_up", "outdated",
           "program_bytes", "program_name", "program_path", "read_program", "recording", "start_page", "store_folder",
           "write", "write_json", "write_program"]

STORE_VARIABLE = "REMAT_GUIDE_FIGURES"
"""Names the store's folder (the site's is ``docs/_figures``); unset, nothing is read or recorded."""
LOG_VARIABLE = "REMAT_GUIDE_FIGURES_LOG"
"""Names a folder where a build records what it read from the store and what it had to compile."""
PAGE_VARIABLE = "REMAT_GUIDE_PAGE"
"""Names who is compiling (a page of the site, a test file): recorded with every read and miss."""
REHEARSAL_VARIABLE = "REMAT_GUIDE_FIGURES_REHEARSAL"
"""Set to a word, it is added to every compiler's version in the keys: every entry misses, as after an upgrade."""
PROGRAMS = "programs"
"""The store's folder of lowered programs, one ``<key>.mlir.xz`` each: enough to compile an entry again."""

_MODULE = re.compile(r"^module @([\w.$-]+)", re.MULTILINE)


class StoreError(ValueError):
    """A store file that cannot be read, or an entry whose check digest does not match its figures."""


def store_folder() -> pathlib.Path | None:
    """The store's folder, from ``REMAT_GUIDE_FIGURES``; ``None`` when it is unset."""
    value = os.environ.get(STORE_VARIABLE, "")
    return pathlib.Path(value) if value else None


def entry_key(target: str, compiler: str, options: dict[str, Any], text: str) -> str:
    """The key of a program's figures: everything that determines a compile, and nothing else.

    Args:
        target: The target's name (``"h100"``).
        compiler: The compiler's packages and versions (``"jaxlib 0.12.0.1, libtpu 0.0.51"``).
        options: The compile options, with ``XLA_FLAGS`` and JAX's settings that reach the compiler.
        text: The lowered program's text, without source locations (a Pallas kernel's body
            names source files without their folders: :func:`remat_guide.targets.lowering_for`).

    Examples:
        >>> key = entry_key("h100", "jaxlib 1", {}, "module @jit_f {}")
        >>> len(key), key == entry_key("h100", "jaxlib 1", {}, "module @jit_f {}")
        (64, True)
        >>> key == entry_key("h200", "jaxlib 1", {}, "module @jit_f {}")
        False
    """
    parts = [target, compiler, json.dumps(options, sort_keys=True), text]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def program_name(text: str) -> str:
    """The lowered program's module name (``jit_loss``), for messages and the store's entries."""
    match = _MODULE.search(text)
    return match.group(1) if match else "unnamed program"


def figures_of(entry: dict[str, Any]) -> dict[str, Any]:
    """The compiler's output in an entry: what a recompile must reproduce exactly."""
    fields = ("memory", "cost", "instructions", "kernels", "flops", "error", "log")
    return {field: entry[field] for field in fields if field in entry}


def outdated(entry: dict[str, Any], platform: str, program: str | None = None) -> bool:
    """Whether an entry was kept before the store held all that is read of it, so that it is compiled again.

    A GPU or TPU program (``platform="cuda"`` or ``"tpu"``) needs its kernels, and when it
    moves bytes to or from the host, their schedule (``remat_guide._roofline.kernels``); a
    GPU program's kernels also carry their dots' shapes and their strided reads' extra
    bytes; a program with collectives between devices, those and their schedule; a TPU
    program that calls Pallas kernels (its kept ``program`` text names them), their calls
    counted as its splash kernels' FLOPs are read at every batch. A refusal needs none of
    these.
    """
    if platform not in ("cuda", "tpu") or "error" in entry:
        return False
    kernels = entry.get("kernels")
    collectives = any(map(roofline.is_collective, entry.get("instructions") or {}))
    pallas = platform == "tpu" and program is not None and "tpu_custom_call" in program
    return kernels is None or bool((kernels["host_out"] or kernels["host_in"]) and "schedule" not in kernels) or (
        platform == "tpu" and "matmul_flops_once" not in kernels) or (
        platform == "cuda" and any(len(row) < 5 for row in kernels["kernels"])) or (
        collectives and "collectives" not in kernels) or (pallas and "pallas_calls" not in kernels)


def identity_of(entry: dict[str, Any]) -> dict[str, Any]:
    """What an entry says was compiled: its key, target, compiler, options and how ``compile`` was called."""
    fields = ("key", "target", "compiler", "options", "program", "compile")
    return {field: entry[field] for field in fields if field in entry}


def digest(entry: dict[str, Any]) -> str:
    """A check digest of an entry's identity and figures, stored beside them.

    A number changed by hand without compiling no longer matches it, and loading the store
    says so; ``make verify-figures`` and the sample that ``make test`` recompiles check the
    figures themselves against the compiler.
    """
    fields = {name: value for name, value in entry.items() if name not in ("check", "where")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _line(entry: dict[str, Any]) -> str:
    return json.dumps(entry, sort_keys=True, separators=(",", ":"))


def read_file(path: pathlib.Path) -> dict[str, dict[str, Any]]:
    """The entries of one store file by key, each checked against its digest."""
    entries = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            entry = json.loads(line)
            key = entry["key"]
        except (ValueError, TypeError, KeyError) as error:
            raise StoreError(f"{path.name}, line {number}: not a store entry ({error})") from None
        if entry.get("check") != digest(entry):
            raise StoreError(
                f"{path.name}, line {number}: entry {key[:16]} ({entry.get('program')} for {entry.get('target')}) "
                f"does not match its check digest: the store holds compiler output and is never edited by "
                f"hand; restore the file (git checkout) or recompile it (make verify-figures)")
        entries[key] = entry
    return entries


@functools.cache
def load(folder: pathlib.Path) -> dict[str, dict[str, Any]]:
    """Every entry of the store in ``folder`` (one ``<target>.jsonl`` file per target), by key."""
    entries: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        entries.update(read_file(path))
    return entries


def write(folder: pathlib.Path, entries: Iterable[dict[str, Any]]) -> None:
    """Writes ``entries`` as the whole store: a file per target, one entry a line, sorted by key."""
    by_target: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        clean = {name: value for name, value in entry.items() if name != "where"}
        clean["check"] = digest(clean)
        by_target.setdefault(clean["target"], []).append(clean)
    folder.mkdir(parents=True, exist_ok=True)
    for path in folder.glob("*.jsonl"):
        if path.stem not in by_target:
            path.unlink()
    for name, target_entries in by_target.items():
        lines = [_line(entry) for entry in sorted(target_entries, key=lambda e: e["key"])]
        # Written aside and renamed: a build reading the store never sees half a file.
        written = folder / f".{name}.jsonl.tmp"
        written.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(written, folder / f"{name}.jsonl")


def program_path(folder: pathlib.Path, key: str) -> pathlib.Path:
    """Where ``folder`` (a store, or a build's log) keeps the lowered program of ``key``, compressed."""
    return folder / PROGRAMS / f"{key}.mlir.xz"


def write_program(folder: pathlib.Path, key: str, text: str) -> pathlib.Path:
    """Keeps a lowered program's text, compressed, as ``<folder>/programs/<key>.mlir.xz``; several processes
    may write at once."""
    path = program_path(folder, key)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, delete=False, suffix=".tmp") as file:
            file.write(lzma.compress(text.encode(), preset=9 | lzma.PRESET_EXTREME))
        os.chmod(file.name, 0o644)
        os.replace(file.name, path)
    return path


def has_program(folder: pathlib.Path, key: str) -> bool:
    """Whether ``folder`` (a store, or a build's log) keeps the lowered program of ``key``."""
    return program_path(folder, key).is_file()


def program_bytes(folder: pathlib.Path, key: str) -> int:
    """The compressed size of the program kept for ``key`` in ``folder``; 0 if none is kept."""
    try:
        return program_path(folder, key).stat().st_size
    except OSError:
        return 0


def read_program(folder: pathlib.Path, key: str) -> str | None:
    """The lowered program kept for ``key`` in ``folder`` (a store, or a build's log); ``None`` if none is."""
    try:
        return lzma.decompress(program_path(folder, key).read_bytes()).decode()
    except OSError:
        return None


def write_json(path: pathlib.Path, value: Any) -> None:
    """Writes ``value`` to ``path`` whole or not at all; several processes may write at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp") as file:
        json.dump(value, file, sort_keys=True)
    os.replace(file.name, path)


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("_") or "unnamed"


class Log:
    """A build's record of the store: the keys each page or test read, what it compiled.

    ``read/<who>.txt`` lists the keys that a page (or test file) read, and the processes it
    started, emptied by :meth:`start` when it runs again; ``missed/<key>.json`` holds each
    entry compiled because the store lacked it (also read back by later processes of the same
    build), and ``programs/<key>.mlir.xz`` its program; ``replaced/<key>.json`` names the
    entry, compiled by the installed compiler, that replaces a stored entry of another.
    """

    def __init__(self, folder: pathlib.Path) -> None:
        self.folder = folder

    def start(self, who: str) -> None:
        """Forgets what ``who`` read before: called as a page (or test file) starts to run, before it
        or any process it starts reads the store."""
        (self.folder / "read" / f"{_safe(who)}.txt").unlink(missing_ok=True)

    def read(self, key: str, who: str) -> None:
        path = self.folder / "read" / f"{_safe(who)}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as file:
            file.write(f"{key}\n")

    def missed(self, entry: dict[str, Any], text: str) -> None:
        """Records an entry compiled because the store lacked it, with its program."""
        write_program(self.folder, entry["key"], text)
        write_json(self.folder / "missed" / f"{entry['key']}.json", entry)

    def completed(self, entry: dict[str, Any], text: str) -> None:
        """Records a stored entry read without its program or its compile arguments, with them: ``make figures``
        completes the store from it."""
        write_program(self.folder, entry["key"], text)
        write_json(self.folder / "completed" / f"{entry['key']}.json", entry)

    def all_completed(self) -> list[dict[str, Any]]:
        return [json.loads(path.read_text(encoding="utf-8"))
                for path in sorted((self.folder / "completed").glob("*.json"))]

    def find_missed(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.folder / "missed" / f"{key}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def replaced(self, old: str, new: str) -> None:
        write_json(self.folder / "replaced" / f"{old}.json", new)

    def all_replaced(self) -> dict[str, str]:
        """The stored entries that a recompile for the installed compiler replaced: old key to new key."""
        return {path.stem: json.loads(path.read_text(encoding="utf-8"))
                for path in sorted((self.folder / "replaced").glob("*.json"))}

    def all_missed(self) -> list[dict[str, Any]]:
        return [json.loads(path.read_text(encoding="utf-8"))
                for path in sorted((self.folder / "missed").glob("*.json"))]

    def reads(self) -> dict[str, set[str]]:
        """The keys read, by who read them."""
        return {path.stem: set(path.read_text(encoding="utf-8").split())
                for path in sorted((self.folder / "read").glob("*.txt"))}


_RECORDINGS: list[set[str]] = []


def looked_up(key: str) -> None:
    """Notes that this process looked up the entry ``key`` in the store, for each :func:`recording` under way."""
    for keys in _RECORDINGS:
        keys.add(key)


@contextlib.contextmanager
def recording() -> Iterator[set[str]]:
    """Collects the keys of the entries that this process looks up in the store (:func:`looked_up`) while it lasts."""
    keys: set[str] = set()
    _RECORDINGS.append(keys)
    try:
        yield keys
    finally:
        del _RECORDINGS[next(i for i, each in enumerate(_RECORDINGS) if each is keys)]


_STARTED_VARIABLE = "REMAT_GUIDE_PAGE_STARTED"


def start_page() -> None:
    """Empties the record of what the page or test file named by ``REMAT_GUIDE_PAGE`` read, as it starts to run.

    Once per page: a process that the page (or test) started, a notebook's kernel too, inherits
    the mark and adds to the same record.
    """
    build_log, who = log(), os.environ.get(PAGE_VARIABLE, "")
    if build_log is None or not who or os.environ.get(_STARTED_VARIABLE) == who:
        return
    os.environ[_STARTED_VARIABLE] = who
    build_log.start(who)


def log() -> Log | None:
    """This process's log, in the folder ``REMAT_GUIDE_FIGURES_LOG`` names; ``None`` when it is unset."""
    value = os.environ.get(LOG_VARIABLE, "")
    return Log(pathlib.Path(value)) if value else None
