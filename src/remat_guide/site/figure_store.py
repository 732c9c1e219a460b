"""The figure store's commands: ``make figures``, the sample that ``make test`` recompiles, ``make verify-figures``."""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
from collections.abc import Sequence
from typing import Any

from remat_guide import _store as store

__all__ = ["check", "compiler_family", "draw_sample", "main", "update", "verify"]

SAMPLE_PER_COMPILER = 3


def compiler_family(entry: dict[str, Any]) -> str:
    """Which of XLA's compilers made an entry: ``"tpu"`` (libtpu), ``"gpu"`` (the CUDA plugin) or another."""
    compiler = entry["compiler"]
    if "libtpu" in compiler:
        return "tpu"
    if "cuda" in compiler:
        return "gpu"
    return compiler


def _describe(key: str, entry: dict[str, Any]) -> str:
    return f"{key[:16]} ({entry['program']} for {entry['target']}, {entry['compiler']})"


def _is_page(who: str) -> bool:
    """Whether a reader in the log is a page; a test file or a module's doctests is named by its ``.py`` file."""
    return not who.endswith(".py")


def _read_keys(log: store.Log, pages_only: bool = False) -> set[str]:
    return {key for who, keys in log.reads().items() if not pages_only or _is_page(who) for key in keys}


def update(store_dir: pathlib.Path, log: store.Log) -> int:
    """``make figures``: adds what the build compiled and the store lacked, drops what no page or test read."""
    entries = store.load(store_dir) if store_dir.is_dir() else {}
    missed = {entry["key"]: entry for entry in log.all_missed()}
    read = _read_keys(log)
    if not read and not missed:
        print(f"figure store: {log.folder} records no build; run `make test` first", file=sys.stderr)
        return 1
    readers = log.reads()
    whole = any(not _is_page(who) for who in readers) and any(_is_page(who) for who in readers)
    kept = {key: entry for key, entry in entries.items() if key in read or not whole}
    dropped = len(entries) - len(kept)
    kept.update(missed)
    store.write(store_dir, kept.values())
    for path in (log.folder / "missed").glob("*.json"):
        path.unlink()
    print(f"figure store: {len(missed)} entries added, {dropped} that no page or test read dropped, "
          f"{len(kept)} in {store_dir}")
    if not whole:
        print("figure store: the log holds no run of both the pages and the tests, so no entry was dropped "
              "(run `make test`, then `make figures`, to drop what nothing reads)")
    return 0


def draw_sample(store_dir: pathlib.Path, log: store.Log, seed: int, out: pathlib.Path,
                per_compiler: int = SAMPLE_PER_COMPILER) -> int:
    """Picks ``per_compiler`` entries of each compiler among those the pages read, to compile again."""
    entries = store.load(store_dir)
    read = sorted(_read_keys(log, pages_only=True) & entries.keys())
    by_family: dict[str, list[str]] = {}
    for key in read:
        by_family.setdefault(compiler_family(entries[key]), []).append(key)
    chosen = []
    rng = random.Random(seed)
    for family in sorted(by_family):
        keys = by_family[family]
        chosen += rng.sample(keys, min(per_compiler, len(keys)))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(f"{key}\n" for key in chosen), encoding="utf-8")
    print(f"figure store: recompiling {len(chosen)} of the {len(read)} entries the pages read "
          f"({per_compiler} per compiler, seed {seed}; replay with FIGURE_SEED={seed} make test)")
    for key in chosen:
        print(f"  {_describe(key, entries[key])}")
    return 0


def _missed_problems(log: store.Log) -> list[str]:
    return [f"{entry['where']} compiled {entry['program']} for {entry['target']} ({entry['key'][:16]}), "
            "which the store lacks" for entry in log.all_missed()]


def _recheck_problems(entries: dict[str, dict[str, Any]], keys: Sequence[str],
                      rechecked: dict[str, dict[str, Any]]) -> list[str]:
    problems = []
    for key in keys:
        result = rechecked.get(key)
        if key not in entries:
            problems.append(f"sampled entry {key[:16]} is not in the store")
        elif result is None:
            problems.append(f"entry {_describe(key, entries[key])} was not compiled again: no page read it")
        elif not result["same"]:
            parts = ", ".join(sorted(result["differences"]))
            problems.append(f"entry {_describe(key, entries[key])} differs from a fresh compile in its {parts}"
                            f" (read by {result['where']}): {result['differences']}")
    return problems


def _report_unread(entries: dict[str, dict[str, Any]], log: store.Log) -> None:
    unread = sorted(entries.keys() - _read_keys(log))
    if unread:
        print(f"figure store: {len(unread)} entries no page or test read in this build (`make figures` drops "
              "them):")
        for key in unread:
            print(f"  {_describe(key, entries[key])}")


def check(store_dir: pathlib.Path, log: store.Log, recheck_log: store.Log, sample: pathlib.Path) -> int:
    """After ``make test``: no program missing from the store, and every sampled entry recompiled the same."""
    entries = store.load(store_dir)
    keys = sample.read_text(encoding="utf-8").split()
    problems = _missed_problems(log) + _missed_problems(recheck_log)
    problems += _recheck_problems(entries, keys, recheck_log.all_rechecked())
    _report_unread(entries, log)
    if problems:
        print("figure store: FAILED", *problems, sep="\n  ", file=sys.stderr)
        print("A program the store lacks: run `make figures` and commit docs/_figures. An entry that differs: "
              "the store is compiler output; restore it (git checkout docs/_figures) or find what changed the "
              "compiler (its version, XLA_FLAGS).", file=sys.stderr)
        return 1
    print(f"figure store: the {len(keys)} sampled entries compiled again to the same figures; "
          f"no page or test compiled a program the store lacks ({len(entries)} entries)")
    return 0


def verify(store_dir: pathlib.Path, recheck_log: store.Log) -> int:
    """``make verify-figures``: every entry of the store compiled again, to the same figures."""
    entries = store.load(store_dir)
    rechecked = recheck_log.all_rechecked()
    problems = _missed_problems(recheck_log) + _recheck_problems(entries, sorted(entries), rechecked)
    if problems:
        print(f"figure store: {len(problems)} problems", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(f"figure store: all {len(entries)} entries compiled again to the same figures")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: ``python -m remat_guide.site.figure_store {update,sample,check,verify} ...``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["update", "sample", "check", "verify"])
    parser.add_argument("--store", type=pathlib.Path, required=True, help="the store's folder (docs/_figures)")
    parser.add_argument("--log", type=pathlib.Path, help="the build's log folder (_build/figures)")
    parser.add_argument("--recheck-log", type=pathlib.Path, help="the log of the build that recompiled")
    parser.add_argument("--sample", type=pathlib.Path, help="the file of sampled keys")
    parser.add_argument("--seed", type=int, help="the sample's seed (default: a random one, printed)")
    options = parser.parse_args(argv)
    log = store.Log(options.log) if options.log else None
    recheck_log = store.Log(options.recheck_log) if options.recheck_log else None
    try:
        if options.command == "update":
            return update(options.store, log)
        if options.command == "sample":
            seed = options.seed if options.seed is not None else random.SystemRandom().randrange(10**6)
            return draw_sample(options.store, log, seed, options.sample)
        if options.command == "check":
            return check(options.store, log, recheck_log, options.sample)
        return verify(options.store, recheck_log)
    except store.StoreError as error:
        print(f"figure store: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
