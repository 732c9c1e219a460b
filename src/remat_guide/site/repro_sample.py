"""The pages that `make test`'s reproducibility build executes afresh: a seeded sample, the rest from the cache."""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
from collections.abc import Sequence

__all__ = ["draw", "main"]


def draw(seconds: dict[str, float], budget: float, seed: int) -> list[str]:
    """Pages in a seeded random order, kept while their recorded seconds stay within ``budget``.

    The first page drawn is always kept, however long it ran, so that every page, the
    slowest included, has the same chance to lead a sample; the rest are kept when they
    still fit in what is left. Returned in name order.

    Examples:
        >>> draw({"a.md": 5.0, "b.md": 50.0, "c.md": 20.0}, budget=30.0, seed=0)
        ['a.md', 'c.md']
        >>> draw({"a.md": 5.0, "b.md": 50.0, "c.md": 20.0}, budget=30.0, seed=1)  # drawn first, over budget
        ['b.md']
    """
    if budget < 0:
        raise ValueError(f"budget must be at least 0 seconds, got {budget}")
    order = sorted(seconds)
    random.Random(seed).shuffle(order)
    chosen, spent = [], 0.0
    for page in order:
        if not chosen or spent + seconds[page] <= budget:
            chosen.append(page)
            spent += seconds[page]
    return sorted(chosen)


def main(argv: Sequence[str] | None = None) -> int:
    """Drops the sampled pages' executed notebooks from a copy of the build's jupyter-cache.

    The build that reads the copy then executes those pages afresh and takes the others'
    outputs from the cache; its pages are still read, rendered and written from scratch.
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=pathlib.Path, required=True,
                        help="a copy of _build/.jupyter_cache, which the sampled pages are dropped from")
    parser.add_argument("--docs", type=pathlib.Path, required=True,
                        help="the folder of the pages the cache's records name (the build's docs/)")
    parser.add_argument("--budget", type=float, required=True,
                        help="the seconds of execution (as the pages took in `make html`) to spend")
    parser.add_argument("--seed", type=int, help="the sample's seed (default: a random one, printed)")
    options = parser.parse_args(argv)
    import jupyter_cache  # a build tool's dependency, imported only by this command

    seed = random.SystemRandom().randrange(2**32) if options.seed is None else options.seed
    cache = jupyter_cache.get_cache(str(options.cache))
    records: dict[str, list] = {}
    for record in cache.list_cache_records():
        page = pathlib.Path(record.uri)
        if page.is_relative_to(options.docs):  # not a record of another tree's pages
            records.setdefault(page.relative_to(options.docs).as_posix(), []).append(record)
    seconds = {name: float(kept[-1].data.get("execution_seconds") or 0.0) for name, kept in records.items()}
    chosen = draw(seconds, options.budget, seed)
    for name in chosen:
        for record in records[name]:
            cache.remove_cache(record.pk)
    cache.db.dispose()
    total = sum(seconds.values())
    print(f"test-repro: {len(chosen)} of {len(seconds)} pages executed afresh (seed {seed}; replay with "
          f"REPRO_SEED={seed} make test; `make test-repro` executes every page), "
          f"{sum(seconds[name] for name in chosen):.0f} of the {total:.0f} s they took in make html: "
          + ", ".join(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
