"""Fixtures of the tests that read the built site, the hook that marks those tests, and names for the figure store."""

import os
import pathlib
from collections.abc import Callable

import pytest

from helpers import ROOT, SLOWEST_FIRST
from remat_guide import _store as store


@pytest.fixture(scope="session")
def site_dir() -> pathlib.Path:
    """The built site: $REMAT_GUIDE_SITE (absolute, or relative to the checkout), by default _build/html."""
    site = ROOT / os.environ.get("REMAT_GUIDE_SITE", "_build/html")
    assert (site / "index.html").is_file(), f"{site} holds no built site: run `make html` first"
    return site


@pytest.fixture(scope="session")
def built_page(site_dir: pathlib.Path) -> Callable[[str], str]:
    """Reads a built page by its path in the site, such as ``"reference/policies.html"``."""

    def read(name: str) -> str:
        path = site_dir / name
        assert path.is_file(), f"{path} was not built"
        return path.read_text(encoding="utf-8")

    return read


class _NameTheTestFile:
    """Names each test's file in the figure store's log of what it read or compiled (before its fixtures run).

    At a file's first test, what it read in an earlier run is forgotten: a file runs in one
    process (`make` runs pytest with ``--dist loadfile``), and the processes its tests start add
    to the same record. Registered as a plugin,
    not as a hook of this folder, so that the doctests of src/ and docs/_ext/ are named too.
    """

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        os.environ[store.PAGE_VARIABLE] = item.nodeid.split("::")[0]
        store.start_page()


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_NameTheTestFile(), "remat-guide-name-the-test-file")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks every test that reads the built site with ``site``; runs the slowest files first."""
    for item in items:
        if "site_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.site)
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
