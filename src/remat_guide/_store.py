"""The figure store: what XLA's accelerator compilers produced for each program, kept as sorted JSON lines."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import re
import tempfile
from collections.abc import Iterable
from typing import Any

__all__ = ["LOG_VARIABLE", "PAGE_VARIABLE", "RECHECK_VARIABLE", "STORE_VARIABLE", "Log", "StoreError",
           "digest", "entry_key", "figures_of", "load", "log", "program_name", "recheck_keys", "start_page",
           "store_folder", "write", "write_json"]

STORE_VARIABLE = "REMAT_GUIDE_FIGURES"
"""Names the store's folder (the site's is ``docs/_figures``); unset, nothing is read or recorded."""
LOG_VARIABLE = "REMAT_GUIDE_FIGURES_LOG"
"""Names a folder where a build records what it read from the store and what it had to compile."""
PAGE_VARIABLE = "REMAT_GUIDE_PAGE"
"""Names who is compiling (a page of the site, a test file): recorded with every read and miss."""
RECHECK_VARIABLE = "REMAT_GUIDE_FIGURES_RECHECK"
"""Names a file of store keys (one a line, or the word ``all``) to compile again when read, and compare."""

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
        text: The lowered program's text, without source locations.

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
    fields = ("memory", "cost", "instructions", "kernels", "error", "log")
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
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_json(path: pathlib.Path, value: Any) -> None:
    """Writes ``value`` to ``path`` whole or not at all; several processes may write at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp") as file:
        json.dump(value, file, sort_keys=True)
    os.replace(file.name, path)


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("_") or "unnamed"


class Log:
    """A build's record of the store: the keys each page or test read, what it compiled, what it rechecked.

    ``read/<who>.txt`` lists the keys that a page (or test file) read, and the processes it
    started, emptied by :meth:`start` when it runs again; ``missed/<key>.json`` holds each
    entry compiled because the store lacked it (also read back by later processes of the same
    build); ``rechecked/<key>.json`` says whether a recompile matched the store.
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

    def missed(self, entry: dict[str, Any]) -> None:
        write_json(self.folder / "missed" / f"{entry['key']}.json", entry)

    def find_missed(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.folder / "missed" / f"{key}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def rechecked(self, key: str, result: dict[str, Any]) -> None:
        write_json(self.folder / "rechecked" / f"{key}.json", result)

    def all_missed(self) -> list[dict[str, Any]]:
        return [json.loads(path.read_text(encoding="utf-8"))
                for path in sorted((self.folder / "missed").glob("*.json"))]

    def all_rechecked(self) -> dict[str, dict[str, Any]]:
        return {path.stem: json.loads(path.read_text(encoding="utf-8"))
                for path in sorted((self.folder / "rechecked").glob("*.json"))}

    def reads(self) -> dict[str, set[str]]:
        """The keys read, by who read them."""
        return {path.stem: set(path.read_text(encoding="utf-8").split())
                for path in sorted((self.folder / "read").glob("*.txt"))}


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


@functools.cache
def _recheck_file(value: str) -> frozenset[str] | str:
    text = pathlib.Path(value).read_text(encoding="utf-8")
    return "all" if text.strip() == "all" else frozenset(text.split())


def recheck_keys() -> frozenset[str] | str:
    """The keys to compile again when read (``"all"`` for every one), from ``REMAT_GUIDE_FIGURES_RECHECK``."""
    value = os.environ.get(RECHECK_VARIABLE, "")
    return _recheck_file(value) if value else frozenset()
