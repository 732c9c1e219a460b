"""The figure store's commands: ``make figures``, ``make verify-figures``, the refresh before a build, the checks."""

from __future__ import annotations

import argparse
import concurrent.futures
import math
import multiprocessing
import os
import pathlib
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from remat_guide import _store as store

__all__ = ["check", "compiler_family", "draw_sample", "main", "recompile", "refresh", "reproduce", "update",
           "verify"]

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


def _platform(name: str) -> str:
    """The platform of a store's target: ``"cpu"`` for this machine's CPU (``remat_guide._cache.CPU``), else the
    accelerator's."""
    from remat_guide._cache import CPU
    from remat_guide.targets import target

    return "cpu" if name == CPU else target(name).platform


def _architecture(entry_or_compiler: dict[str, Any] | str) -> str:
    """The machine architecture a CPU entry's compiler names (its last part: ``x86_64``)."""
    compiler = entry_or_compiler if isinstance(entry_or_compiler, str) else entry_or_compiler["compiler"]
    return compiler.rsplit(", ", 1)[-1]


def _installed_compilers(entries: Iterable[dict[str, Any]]) -> dict[str, str]:
    """The installed compiler's version for each target among ``entries``, looked up once per target."""
    from remat_guide._cache import compiler_version

    return {name: compiler_version(_platform(name)) for name in {entry["target"] for entry in entries}}


# Compiling entries again, in worker processes ------------------------------------------------------------


def _start_worker(cpu_devices: int) -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    # Before the backend starts: a CPU entry names its devices by id, as many as its page made.
    jax.config.update("jax_num_cpu_devices", cpu_devices)


def _cpu_devices(work: Iterable[tuple[dict[str, Any], str]]) -> int:
    """How many CPU devices the CPU entries among ``work`` were compiled for, at least 1."""
    from remat_guide._cache import CPU

    return max((max(entry["compile"]["devices"]) + 1 for entry, _ in work if entry["target"] == CPU), default=1)


def _compile_in_worker(entry: dict[str, Any], text: str) -> tuple[dict[str, Any], float]:
    import jax

    from remat_guide._cache import CPU, compile_entry
    from remat_guide.targets import target, target_devices

    started = time.perf_counter()
    if entry["target"] == CPU:
        compiled = compile_entry(entry, text, "cpu", jax.devices("cpu"))
    else:
        chosen = target(entry["target"])
        devices = target_devices(chosen, len(entry["compile"]["devices"]))
        compiled = compile_entry(entry, text, chosen.platform, devices)
    return compiled, time.perf_counter() - started


def _jobs(jobs: int | None) -> int:
    return max(1, jobs or len(os.sched_getaffinity(0)))


def recompile(work: Sequence[tuple[dict[str, Any], str]], jobs: int | None,
              done: Callable[[dict[str, Any], dict[str, Any], float, str], None],
              start: Callable[[dict[str, Any]], bool] | None = None) -> None:
    """Compiles each ``(entry, program text)`` again in ``jobs`` worker processes (one per core when ``None``).

    The longest programs start first; with ``start``, the entries go in the order given, and
    each starts only if ``start(entry)``, asked when a process is free for it (the others are
    left out). ``done(entry, compiled, seconds, progress)`` is called in this process as each
    finishes, with the new entry (see ``remat_guide._cache.compile_entry``).
    """
    ordered = list(work) if start else sorted(work, key=lambda item: -len(item[1]))
    waiting = iter(ordered)
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(_jobs(jobs), mp_context=context, initializer=_start_worker,
                                                initargs=(_cpu_devices(work),)) as pool:
        running: dict[concurrent.futures.Future, dict[str, Any]] = {}

        def submit_next() -> None:
            for entry, text in waiting:
                if start is None or start(entry):
                    running[pool.submit(_compile_in_worker, entry, text)] = entry
                    return

        for _ in range(_jobs(jobs)):
            submit_next()
        number = 0
        while running:
            finished, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                entry, number = running.pop(future), number + 1
                compiled, seconds = future.result()
                done(entry, compiled, seconds, f"[{number:>{len(str(len(ordered)))}}/{len(ordered)}]")
                submit_next()


def _outcome(figures: dict[str, Any]) -> str:
    """A few words on what a compile gave: a refusal's figure, or the memory it plans."""
    from remat_guide._measure import refused_bytes

    if "error" in figures:
        needed = refused_bytes(figures["error"])
        return "refused" + (f", needs {needed / 2**30:.2f} GiB" if needed is not None else "")
    memory = figures["memory"]
    return f"temp {memory['temp_size_in_bytes'] / 2**30:.3f} GiB"


def _comparable(figures: dict[str, Any]) -> dict[str, Any]:
    """What a compile from a kept program must reproduce: the figures, and of a refusal its first line.

    That line holds the refusal's figure (``Used 95.75G of 95.73G hbm``); the rest of the
    message lists the largest allocations by HLO instruction names, which come from the
    source metadata that the kept program (the lowered text without locations) leaves out.
    """
    if "error" in figures:
        return {**figures, "error": figures["error"].splitlines()[0]}
    return figures


def _slowest(times: dict[str, tuple[float, dict[str, Any]]], count: int = 5) -> list[str]:
    ranked = sorted(times.items(), key=lambda item: -item[1][0])[:count]
    return [f"{seconds:7.1f} s  {_describe(key, entry)}, {_outcome(entry)}" for key, (seconds, entry) in ranked]


def _programs(store_dir: pathlib.Path, entries: Iterable[dict[str, Any]]) -> tuple[list[tuple[dict[str, Any], str]],
                                                                                   list[str]]:
    """Each entry with its kept program, and the problems of those that have none (or no compile arguments)."""
    work, problems = [], []
    for entry in entries:
        text = store.read_program(store_dir, entry["key"])
        if text is None or "compile" not in entry:
            problems.append(f"entry {_describe(entry['key'], entry)} keeps no program to compile again: run a "
                            "build that reads it, then `make figures`")
        else:
            work.append((entry, text))
    return work, problems


# The commands -----------------------------------------------------------------------------------------------


def update(store_dir: pathlib.Path, log: store.Log) -> int:
    """``make figures``: adds what the build compiled and the store lacked, drops what no page or test read.

    Entries that a build completed with their programs are kept with them; entries that the
    refresh before a build replaced (compiled again by a newly installed compiler) are dropped.
    """
    entries = store.load(store_dir) if store_dir.is_dir() else {}
    missed = {entry["key"]: entry for entry in log.all_missed()}
    completed = {entry["key"]: entry for entry in log.all_completed() if entry["key"] in entries}
    replaced = log.all_replaced()
    read = _read_keys(log)
    if not read and not missed:
        print(f"figure store: {log.folder} records no build; run `make html` or `make test` first", file=sys.stderr)
        return 1
    readers = log.reads()
    whole = any(not _is_page(who) for who in readers) and any(_is_page(who) for who in readers)
    kept = {key: entry for key, entry in entries.items()
            if (key in read or not whole) and not (key in replaced and replaced[key] in missed)}
    dropped = len(entries) - len(kept)
    kept.update({key: entry for key, entry in completed.items() if key in kept})
    kept.update(missed)
    for key in {**missed, **completed}:
        if key in kept and not store.has_program(store_dir, key):
            target = store.program_path(store_dir, key)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(store.program_path(log.folder, key), target)
    store.write(store_dir, kept.values())
    for path in (store_dir / store.PROGRAMS).glob("*.mlir.xz"):
        if path.name.removesuffix(".mlir.xz") not in kept:
            path.unlink()
    for folder in ("missed", "completed", "replaced"):
        for path in (log.folder / folder).glob("*.json"):
            path.unlink()
    print(f"figure store: {len(missed)} entries added, {len(completed)} completed with their programs, "
          f"{dropped} dropped ({sum(key in replaced for key in entries)} replaced by a new compiler's, the others "
          f"read by no page or test), {len(kept)} in {store_dir}")
    if not whole:
        print("figure store: the log holds no run of both the pages and the tests, so no unread entry was dropped "
              "(run `make test`, then `make figures`, to drop what nothing reads)")
    return 0


def refresh(store_dir: pathlib.Path, log: store.Log, jobs: int | None = None) -> int:
    """Before a build: every entry made by another compiler than the installed one, or outdated, compiled again.

    A new jaxlib, libtpu or CUDA plugin (or ``REMAT_GUIDE_FIGURES_REHEARSAL``) changes every
    key, so without this the pages would compile each program inside their cells. Here each
    kept program is compiled in a worker process, one per core, and recorded in the build's
    log as the pages' own compiles are: the pages then read it, and ``make figures`` puts it
    in the store in place of the old entry. An outdated entry (``_store.outdated``: kept
    before the store held a figure the pages now read) is compiled again the same way. Does
    nothing when every entry is the installed compiler's and up to date.
    """
    from remat_guide._cache import CPU

    entries = store.load(store_dir) if store_dir.is_dir() else {}
    installed = _installed_compilers(entries.values())
    replaced = log.all_replaced()
    # A CPU entry of another architecture is another machine's, not an older compiler's: left as it is.
    waiting = [entry for entry in entries.values() if entry["key"] not in replaced
               and not (entry["target"] == CPU and _architecture(entry) != _architecture(installed[CPU]))]
    other = [entry for entry in waiting if entry["compiler"] != installed[entry["target"]]]
    outdated = [entry for entry in waiting if entry["compiler"] == installed[entry["target"]]
                and store.outdated(entry, _platform(entry["target"]),
                                   store.read_program(store_dir, entry["key"]))]
    stale = other + outdated
    if not stale:
        return 0
    work, problems = _programs(store_dir, stale)
    compilers = sorted({installed[entry["target"]] for entry, _ in work})
    texts = {entry["key"]: text for entry, text in work}
    print(f"figure store: {len(other)} entries were compiled by another compiler than the "
          f"installed one ({'; '.join(compilers)}) and {len(outdated)} lack a figure the pages now read: "
          f"compiling {len(work)} of them again from their kept programs in "
          f"{min(_jobs(jobs), max(len(work), 1))} processes, before the pages run", flush=True)
    started, changed = time.perf_counter(), []

    def done(entry: dict[str, Any], compiled: dict[str, Any], seconds: float, progress: str) -> None:
        compiled["check"] = store.digest(compiled)
        log.missed({**compiled, "where": f"the refresh for {compiled['compiler']}"},
                   texts[entry["key"]])
        log.replaced(entry["key"], compiled["key"])
        same = _comparable(store.figures_of(compiled)) == _comparable(store.figures_of(entry))
        if not same:
            changed.append(f"{_describe(entry['key'], entry)}: {_outcome(entry)} before, {_outcome(compiled)} now")
        print(f"  {progress} {seconds:6.1f} s  {compiled['program']} for {compiled['target']}: "
              f"{_outcome(compiled)}{'' if same else ', CHANGED'}", flush=True)

    recompile(work, jobs, done)
    print(f"figure store: compiled {len(work)} programs again in {time.perf_counter() - started:.0f} s; "
          f"{len(work) - len(changed)} gave the same figures as the entries they replace, "
          f"{len(changed)} changed"
          f"{':' if changed else ''}", *changed, sep="\n  ")
    print("figure store: `make figures` stores them in place of the old entries")
    for problem in problems:
        print(f"  {problem}; the page that reads it compiles it", file=sys.stderr)
    return 0


def verify(store_dir: pathlib.Path, keys: Iterable[str] | None = None, jobs: int | None = None,
           budget: float | None = None) -> int:
    """``make verify-figures``: every entry (or those of ``keys``) compiled again from its kept program.

    Each entry must be keyed by its program, target, compiler and options (so its program is
    the one the pages read), made by the installed compiler, and compile again to the same
    figures; a refusal must be refused again with the same figure (the first line of its message).
    With a ``budget`` in seconds (the sample of ``make test``), the entries are compiled in the
    order of ``keys``: the first of each compiler always, each later one only while the
    compiles have taken less than ``budget`` seconds since the first started.
    """
    entries = store.load(store_dir)
    chosen = sorted(entries) if keys is None else list(keys)
    problems = [f"entry {key[:16]} is not in the store" for key in chosen if key not in entries]
    work, missing = _programs(store_dir, [entries[key] for key in chosen if key in entries])
    problems += missing
    checked, installed = [], _installed_compilers(entry for entry, _ in work)
    for entry, text in work:
        if store.entry_key(entry["target"], entry["compiler"], entry["options"], text) != entry["key"]:
            problems.append(f"entry {_describe(entry['key'], entry)}: its kept program is not the one its key "
                            "was made from")
        elif entry["compiler"] != installed[entry["target"]]:
            problems.append(f"entry {_describe(entry['key'], entry)} was compiled by another compiler than the "
                            f"installed {installed[entry['target']]}: run `make html`, then `make figures`")
        else:
            checked.append((entry, text))
    print(f"figure store: compiling {len(checked)} entries again in {min(_jobs(jobs), max(len(checked), 1))} "
          "processes", flush=True)
    started, times, refusals = time.perf_counter(), {}, 0

    def done(entry: dict[str, Any], compiled: dict[str, Any], seconds: float, progress: str) -> None:
        nonlocal refusals
        stored, again = _comparable(store.figures_of(entry)), _comparable(store.figures_of(compiled))
        times[entry["key"]] = (seconds, compiled)
        refusals += "error" in again
        same = compiled["key"] == entry["key"] and again == stored
        if not same:
            parts = sorted(part for part in stored.keys() | again.keys() if stored.get(part) != again.get(part))
            problems.append(f"entry {_describe(entry['key'], entry)} differs from a fresh compile in its "
                            f"{', '.join(parts)}: " + "; ".join(
                                f"{part} stored {stored.get(part)!r}, compiled {again.get(part)!r}" for part in parts))
        print(f"  {progress} {seconds:6.1f} s  {_describe(entry['key'], entry)}: {_outcome(compiled)}"
              f"{'' if same else ', DIFFERS'}", flush=True)

    started_families: set[str] = set()
    left_out: list[dict[str, Any]] = []

    def within_budget(entry: dict[str, Any]) -> bool:
        family = compiler_family(entry)
        if family in started_families and time.perf_counter() - started >= budget:
            left_out.append(entry)
            return False
        started_families.add(family)
        return True

    recompile(checked, jobs, done, within_budget if budget is not None else None)
    elapsed = time.perf_counter() - started
    if left_out:
        print(f"figure store: {len(left_out)} drawn entries left for another run, the compiles having taken "
              f"the budget of {budget:.0f} s:", *(_describe(entry["key"], entry) for entry in left_out),
              sep="\n  ")
    if times:
        print(f"figure store: the slowest of {len(times)} compiles (they ran in {elapsed:.0f} s):",
              *_slowest(times), sep="\n  ")
    if problems:
        print(f"figure store: {len(problems)} problems", *problems, sep="\n  ", file=sys.stderr)
        print("An entry that differs: the store is compiler output; restore it (git checkout docs/_figures) or "
              "find what changed the compiler (its version, XLA_FLAGS).", file=sys.stderr)
        return 1
    print(f"figure store: all {len(times)} entries compiled again to the same figures "
          f"({refusals} of them refusals, refused again with the same figure)")
    return 0


def reproduce(store_dir: pathlib.Path, prefix: str) -> int:
    """One entry, named by the start of its key, compiled again by itself and compared with the store."""
    matches = [key for key in store.load(store_dir) if key.startswith(prefix)]
    if len(matches) != 1:
        print(f"figure store: {len(matches)} entries have a key starting with {prefix!r}; give more of it",
              file=sys.stderr)
        return 2
    return verify(store_dir, matches, jobs=1)


def _weighted_draw(keys: Sequence[str], weights: Sequence[float], count: int, rng: random.Random) -> list[str]:
    """``count`` of ``keys`` without replacement, each drawn with odds proportional to its weight.

    Efraimidis and Spirakis's draw: every key gets ``u ** (1 / weight)`` for a uniform ``u``
    in (0, 1] and the largest are kept, in the order of ``keys``; compared as
    ``log(u) / weight``, which orders them the same and does not underflow to 0 for small
    weights.
    """
    ranked = sorted(range(len(keys)), key=lambda i: math.log(1.0 - rng.random()) / weights[i], reverse=True)
    return [keys[i] for i in sorted(ranked[:count])]


def _sample_odds(program_bytes: int) -> float:
    """An entry's odds in the sample: the inverse square of the size of its kept program.

    The size stands in for the compile time (the longest compiles are of the largest
    programs). With odds inverse to the size alone, the sample's six compiles took 26 to
    178 s over 19 runs of `make test` (median 62 s), beside pytest on the same two cores.
    The size is a loose guide (a kept program of 1.3 kB, compressed, compiled for an H100 in 34 s, one of
    8.6 kB in 122 s): ``make test`` also bounds the sample's time (``verify``'s budget).
    """
    return 1 / max(program_bytes, 1) ** 2


def draw_sample(store_dir: pathlib.Path, log: store.Log, seed: int, out: pathlib.Path,
                per_compiler: int = SAMPLE_PER_COMPILER) -> int:
    """Picks ``per_compiler`` entries of each compiler among those the pages read, to compile again.

    Every entry can be drawn, with the odds of :func:`_sample_odds`, so that the check stays
    short on most runs without leaving any entry out. They are written by rounds, one entry of
    each compiler per round, the order in which :func:`verify` with a budget compiles them.
    """
    entries = store.load(store_dir)
    read = sorted(_read_keys(log, pages_only=True) & entries.keys())
    by_family: dict[str, list[str]] = {}
    for key in read:
        by_family.setdefault(compiler_family(entries[key]), []).append(key)
    drawn = []
    rng = random.Random(seed)
    for family in sorted(by_family):
        keys = by_family[family]
        weights = [_sample_odds(store.program_bytes(store_dir, key)) for key in keys]
        drawn.append(_weighted_draw(keys, weights, min(per_compiler, len(keys)), rng))
    # By rounds, one of each compiler in each: the order in which a budgeted verify compiles them.
    chosen = [keys[turn] for turn in range(per_compiler) for keys in drawn if turn < len(keys)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(f"{key}\n" for key in chosen), encoding="utf-8")
    print(f"figure store: drew {len(chosen)} of the {len(read)} entries the pages read to compile again, in "
          f"this order ({per_compiler} per compiler, with odds inverse to the square of their programs' sizes, "
          f"seed {seed}; replay with FIGURE_SEED={seed} make test)")
    for key in chosen:
        print(f"  {_describe(key, entries[key])}")
    return 0


def _missed_problems(log: store.Log) -> list[str]:
    problems = [f"{entry['where']} compiled {entry['program']} for {entry['target']} ({entry['key'][:16]}), "
                "which the store lacks" for entry in log.all_missed()]
    return problems + [f"{entry['where']} read {entry['program']} for {entry['target']} ({entry['key'][:16]}), "
                       "which the store keeps without its program" for entry in log.all_completed()]


def _report_unread(entries: dict[str, dict[str, Any]], log: store.Log) -> None:
    unread = sorted(entries.keys() - _read_keys(log))
    if unread:
        print(f"figure store: {len(unread)} entries no page or test read in this build (`make figures` drops "
              "them):")
        for key in unread:
            print(f"  {_describe(key, entries[key])}")


def check(store_dir: pathlib.Path, logs: Sequence[store.Log]) -> int:
    """After ``make test``: no page or test compiled a program the store lacks, or read one it keeps incompletely."""
    entries = store.load(store_dir)
    problems = [problem for log in logs for problem in _missed_problems(log)]
    _report_unread(entries, logs[0])
    if problems:
        print("figure store: FAILED", *problems, sep="\n  ", file=sys.stderr)
        print("Run `make figures` and commit docs/_figures.", file=sys.stderr)
        return 1
    print(f"figure store: no page or test compiled a program the store lacks ({len(entries)} entries)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: ``python -m remat_guide.site.figure_store COMMAND --store DIR ...``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["update", "refresh", "sample", "check", "verify", "reproduce"])
    parser.add_argument("key", nargs="?", help="reproduce: the start of the entry's key")
    parser.add_argument("--store", type=pathlib.Path, required=True, help="the store's folder (docs/_figures)")
    parser.add_argument("--log", type=pathlib.Path, action="append", default=[],
                        help="a build's log folder (_build/figures); check takes several")
    parser.add_argument("--sample", type=pathlib.Path, help="the file of sampled keys (sample writes it, verify "
                        "compiles only those)")
    parser.add_argument("--seed", type=int, help="the sample's seed (default: a random one, printed)")
    parser.add_argument("--jobs", type=int, help="worker processes (default: one per core)")
    parser.add_argument("--budget", type=float, help="verify: seconds after which no more entries start, but the "
                        "first of each compiler (default: none, every entry is compiled)")
    options = parser.parse_args(argv)
    logs = [store.Log(folder) for folder in options.log]
    try:
        if options.command == "update":
            return update(options.store, logs[0])
        if options.command == "refresh":
            return refresh(options.store, logs[0], options.jobs)
        if options.command == "sample":
            seed = options.seed if options.seed is not None else random.SystemRandom().randrange(10**6)
            return draw_sample(options.store, logs[0], seed, options.sample)
        if options.command == "check":
            return check(options.store, logs)
        if options.command == "reproduce":
            return reproduce(options.store, options.key or "")
        keys = options.sample.read_text(encoding="utf-8").split() if options.sample else None
        return verify(options.store, keys, options.jobs, options.budget)
    except store.StoreError as error:
        print(f"figure store: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
