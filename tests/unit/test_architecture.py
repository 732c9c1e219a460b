"""The layout keeps its roles: user tools in the package, the site's machinery beside the pages."""

import ast
import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

import remat_guide
from helpers import ROOT, SLOWEST_FIRST

PACKAGE = ROOT / "src" / "remat_guide"
SITE_ONLY = ("sphinx", "docutils", "myst_nb", "myst_parser", "nbformat", "jupyter_cache", "IPython")
USER_TOOLS = {
    "checkpoint_dot_policy", "check_solution", "SolutionError",
    "saved_residuals", "Residuals", "Residual", "fwd_bwd", "FwdBwd",
    "compare_policies", "recommend_policy", "plan_names", "NamePlan", "Comparison", "PolicyRow", "policy_table",
    "count_flops", "FlopCount", "Loop", "policy_label", "policy_diagram", "PolicyDiagram",
}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): ast.parse(p.read_text(encoding="utf-8"), str(p))
           for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(tree: ast.Module, module: str, top_level_only: bool) -> list[tuple[str, list[str]]]:
    """``(imported module, names)`` for each import statement."""
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{module}: a relative import; the package imports by full name"
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def _private(name: str) -> bool:
    """A leading underscore marks a private name; a dunder such as ``__file__`` is not one."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _declared_imports() -> set[str]:
    """The import names of the dependencies that pyproject.toml declares."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    distributions = {re.split(r"[<>=!~\[ ;]", spec, maxsplit=1)[0].lower().replace("_", "-")
                     for spec in project["dependencies"]}
    return {name for name, owners in importlib.metadata.packages_distributions().items()
            if any(owner.lower().replace("_", "-") in distributions for owner in owners)}


def test_the_public_namespace_exports_only_user_tools():
    assert set(remat_guide.__all__) == USER_TOOLS
    assert all(hasattr(remat_guide, name) for name in remat_guide.__all__)


def test_no_installed_module_is_sphinx_machinery():
    for module, tree in MODULES.items():
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "setup" not in functions, f"{module} defines a Sphinx setup(app): move it to docs/_ext/"
        for imported, _ in _imports(tree, module, top_level_only=True):
            assert imported.split(".")[0] not in SITE_ONLY, f"{module} imports {imported} at module level"


def test_module_level_imports_are_the_standard_library_or_declared_dependencies():
    allowed = set(sys.stdlib_module_names) | _declared_imports() | {"remat_guide"}
    for module, tree in MODULES.items():
        for imported, _ in _imports(tree, module, top_level_only=True):
            assert imported.split(".")[0] in allowed, (
                f"{module} imports {imported} at module level, which pyproject.toml does not declare")


def test_no_private_name_is_imported_from_another_module():
    for module, tree in MODULES.items():
        for imported, names in _imports(tree, module, top_level_only=False):
            if not imported.startswith("remat_guide"):
                continue
            for name in names:
                is_module = f"{imported}.{name}" in MODULES
                assert is_module or not _private(name), f"{module} imports {name} from {imported}"


def test_no_private_attribute_of_another_module_is_read():
    for module, tree in MODULES.items():
        aliases = {}
        for imported, names in _imports(tree, module, top_level_only=False):
            aliases.update({name: f"{imported}.{name}" for name in names if f"{imported}.{name}" in MODULES})
        for node in ast.walk(tree):
            for alias in getattr(node, "names", []):
                if isinstance(node, ast.ImportFrom) and alias.asname and alias.name in aliases:
                    aliases[alias.asname] = aliases[alias.name]
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and _private(node.attr)):
                raise AssertionError(f"{module} reads {node.value.id}.{node.attr}")


def test_the_import_graph_has_no_cycle():
    graph = {module: set() for module in MODULES}
    for module, tree in MODULES.items():
        for imported, names in _imports(tree, module, top_level_only=False):
            targets = [imported, *(f"{imported}.{name}" for name in names)]
            graph[module] |= {t for t in targets if t in MODULES and t != module and t != "remat_guide"}
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            assert state.get(target) != "open", "import cycle: " + " -> ".join([*path, target])
            if target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert graph["remat_guide.compare"] >= {"remat_guide._measure"}  # the graph is really read


def test_the_sphinx_extensions_live_beside_the_pages():
    extensions = sorted(p.stem for p in (ROOT / "docs" / "_ext").glob("*.py"))
    assert extensions == ["api_coverage", "build_stability", "figure_store", "notebook_downloads"]
    conf = (ROOT / "conf.py").read_text(encoding="utf-8")
    for name in extensions:
        assert f'"{name}",' in conf


def _run(code: str) -> str:
    """What ``code`` prints, run in a fresh interpreter (so that nothing is imported yet)."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**os.environ, "JAX_PLATFORMS": "cpu"})
    return result.stdout.strip()


def test_the_public_submodules_are_every_public_module_of_the_package():
    public = {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")}
    assert set(remat_guide.SUBMODULES) == public


def test_importing_the_package_imports_no_submodule_nor_jax():
    loaded = _run("import sys, remat_guide; "
                  "print(sorted(m for m in sys.modules if m.startswith(('remat_guide.', 'jax'))))")
    assert loaded == "[]"


def test_a_submodule_is_reached_from_the_package_on_first_use():
    printed = _run("import sys, remat_guide\n"
                   "print('remat_guide.fit' in sys.modules, remat_guide.fit.largest_batch.__name__,\n"
                   "      'remat_guide.fit' in sys.modules, 'fit' in dir(remat_guide))")
    assert printed == "False largest_batch True True"


def test_fwd_bwd_is_the_function_even_after_its_module_is_imported_by_name():
    printed = _run("import remat_guide.fwd_bwd, remat_guide, inspect\n"
                   "print(inspect.isfunction(remat_guide.fwd_bwd), remat_guide.fwd_bwd.__name__)")
    assert printed == "True fwd_bwd"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        remat_guide.no_such_name  # noqa: B018


def test_the_files_make_test_runs_first_are_test_files_named_once():
    assert len(set(SLOWEST_FIRST)) == len(SLOWEST_FIRST)
    assert [name for name in SLOWEST_FIRST if not (ROOT / name).is_file()] == []
