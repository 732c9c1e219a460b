"""The reproducibility build's sample: which pages it executes afresh, and which it takes from the cache."""

import jupyter_cache
import nbformat
import pytest
from jupyter_cache.base import CacheBundleIn

from remat_guide.site import repro_sample


def _cache_with_pages(tmp_path, seconds):
    """A jupyter-cache holding one executed notebook per page of ``docs/``, with its recorded seconds."""
    cache = jupyter_cache.get_cache(str(tmp_path / "cache"))
    for name, took in seconds.items():
        page = tmp_path / "docs" / name
        page.parent.mkdir(parents=True, exist_ok=True)
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"print({name!r})")])
        nbformat.write(notebook, page)
        cache.cache_notebook_bundle(CacheBundleIn(notebook, str(page), data={"execution_seconds": took}),
                                    check_validity=False)
    return cache


def test_the_drawn_pages_leave_the_cache_and_the_others_stay(tmp_path, capsys):
    seconds = {"a.md": 5.0, "b.md": 50.0, "c.md": 20.0, "reference/d.md": 1.0}
    cache = _cache_with_pages(tmp_path, seconds)
    drawn = repro_sample.draw(seconds, 30.0, 4)
    assert 0 < len(drawn) < len(seconds)
    assert repro_sample.main(["--cache", str(tmp_path / "cache"), "--docs", str(tmp_path / "docs"),
                              "--budget", "30", "--seed", "4"]) == 0
    left = {record.uri.removeprefix(str(tmp_path / "docs") + "/") for record in cache.list_cache_records()}
    cache.db.dispose()
    assert left == set(seconds) - set(drawn)
    assert f"{len(drawn)} of 4 pages executed afresh (seed 4" in capsys.readouterr().out


def test_every_page_can_be_drawn_and_the_budget_bounds_all_but_the_first():
    seconds = {"fast.md": 1.0, "middle.md": 10.0, "slow.md": 300.0}
    samples = [repro_sample.draw(seconds, 15.0, seed) for seed in range(200)]
    assert {page for sample in samples for page in sample} == set(seconds)
    assert all(sample == ["slow.md"] or sum(seconds[page] for page in sample) <= 15.0 for sample in samples)


def test_a_negative_budget_is_refused_by_name():
    with pytest.raises(ValueError, match="budget"):
        repro_sample.draw({"a.md": 1.0}, -1.0, 0)
