"""The versions page's tables: the rows, counts and marks a report builds from the probe's documents."""

import ast
import inspect
import pathlib
import re
import stat
import sys

import jax
import pytest

from remat_guide.site import version_probe, versions
from remat_guide.site.versions import ABSENT, VersionReport, changed_rows, residual_summary


def _param(name: str, kind: str = "KEYWORD_ONLY", default: str = "-", annotation: str = "bool") -> dict:
    return {"name": name, "kind": kind, "default": default, "annotation": annotation}


def _document(version: str, **items) -> dict:
    """A small document in the probe's layout; ``items`` replace its entries."""
    document = {
        "jax": version, "jaxlib": version, "python": "3.13", "backend": "cpu",
        "checkpoint_parameters": [_param("fun", "POSITIONAL_OR_KEYWORD", annotation="Callable"),
                                  _param("prevent_cse", default="True")],
        "remat_is_checkpoint": False,
        "remat_parameters": [_param("fun", "POSITIONAL_OR_KEYWORD", annotation="Callable")],
        "behaviour": {"concrete=True": "ok", "policy='dots'": "raises TypeError: no"},
        "policies": {"namespace_type": "SimpleNamespace", "import_as_module": "ok",
                     "names": ["dots_saveable", "nothing_saveable"], "aliases": [],
                     "kinds": {"dots_saveable": "function", "nothing_saveable": "function"}},
        "residuals": {"policy=None": ["f32[3] from the argument x"]},
        "remat3": {"exists": True, "primitive (flag off)": ["remat2"], "residuals": {}},
        "ad_checkpoint_exports": {"checkpoint_name": "function"},
        "config_flags": {"jax_remat3": False},
        "top_level_names": ["checkpoint", "remat"],
        "residual_line_format": "f32[3] output of cos from <file>.py:<line> (<function>)",
    }
    document.update(items)
    return document


@pytest.fixture
def report() -> VersionReport:
    return _report()


def _report() -> VersionReport:
    """Three versions: 0.2.0 adds a parameter, a policy class and an export; 0.3.0 drops the class."""
    return VersionReport({
        "0.1.0": _document("0.1.0"),
        "0.2.0": _document(
            "0.2.0",
            checkpoint_parameters=[_param("fun", "POSITIONAL_OR_KEYWORD", annotation="Callable"),
                                   _param("prevent_cse", default="True"), _param("concrete")],
            behaviour={"concrete=True": "raises TypeError: concrete", "policy='dots'": "raises TypeError: no"},
            policies={"namespace_type": "SimpleNamespace", "import_as_module": "ok",
                      "names": ["SaveNames", "dots_saveable", "nothing_saveable"], "aliases": [],
                      "kinds": {"SaveNames": "class", "dots_saveable": "instance of Dots",
                                "nothing_saveable": "function"}},
            residuals={"policy=None": ["f32[3] from the argument x"],
                       "SaveNames": {"error": "TypeError: SaveNames() takes no arguments"}},
            ad_checkpoint_exports={"checkpoint_name": "function", "name_p": "Primitive"}),
        "0.3.0": _document(
            "0.3.0",
            residuals={"policy=None": ["f32[3] from the argument x", "f32[3] named 'a'"]},
            ad_checkpoint_exports={"checkpoint_name": "function", "name_p": "Primitive"}),
    })


# --- the rows --------------------------------------------------------------------------------

def test_rows_hold_one_value_per_version_with_labels_in_order_of_appearance(report):
    assert report.versions == ["0.1.0", "0.2.0", "0.3.0"]
    assert report.parameter_rows("checkpoint_parameters") == [
        ("fun", ["positional or keyword; default -; Callable"] * 3),
        ("prevent_cse", ["keyword only; default True; bool"] * 3),
        ("concrete", [ABSENT, "keyword only; default -; bool", ABSENT]),
    ]
    assert report.behaviour_rows() == [
        ("concrete=True", ["ok", "raises TypeError: concrete", "ok"]),
        ("policy='dots'", ["raises TypeError: no"] * 3),
    ]
    policies = report.policy_rows()
    assert [label for label, _ in policies] == [
        "type of jax.checkpoint_policies", "import jax.checkpoint_policies", "number of names",
        "aliases (the same object)", "dots_saveable", "nothing_saveable", "SaveNames"]
    assert report.row(policies, "number of names") == {"0.1.0": 2, "0.2.0": 3, "0.3.0": 2}
    assert report.row(policies, "dots_saveable")["0.2.0"] == "instance of Dots"
    assert report.remat_rows()[0] == ("jax.remat is jax.checkpoint", [False] * 3)
    assert report.export_rows() == [("jax.ad_checkpoint.checkpoint_name", ["function"] * 3),
                                    ("jax.ad_checkpoint.name_p", [ABSENT, "Primitive", "Primitive"])]
    assert report.flag_rows() == [("flag jax_remat3 (default)", [False] * 3)]
    assert report.top_level_rows() == [("names in jax with remat/checkpoint", ["checkpoint, remat"] * 3)]
    assert report.name_rows() == report.export_rows() + report.flag_rows() + report.top_level_rows()
    assert [label for label, _ in report.remat3_rows()] == list(versions.REMAT3_ITEMS)
    assert report.row(report.remat3_rows(), "primitive (flag off)") == {v: ["remat2"] for v in report.versions}
    assert report.format_rows()[0][0] == "output of a primitive"


def test_changed_rows_are_those_whose_values_differ_and_the_table_marks_them(report):
    params = report.parameter_rows("checkpoint_parameters")
    assert changed_rows(params) == ["concrete"]
    assert changed_rows(report.policy_rows()) == ["number of names", "dots_saveable", "SaveNames"]
    assert changed_rows([("same list", [[1, 2], [1, 2]]), ("other list", [[1, 2], [2, 1]])]) == ["other list"]
    table = report.table("parameter", params)
    assert table.changed == ["concrete"]
    html = table._repr_html_()
    # Every column has a header; the mark column comes right after the label.
    assert [h for h in helpers_headers(html)] == ["parameter", "changed", "0.1.0", "0.2.0", "0.3.0"]
    assert '<td class="data row2 col0 remat-changed" >concrete</td>' in html
    assert '<td class="data row2 col1 remat-changed" >yes</td>' in html
    assert '<td class="data row0 col0" >fun</td>' in html and '<td class="data row0 col1" ></td>' in html
    assert "<code>keyword only; default -; bool</code>" in html
    assert f"<code>{ABSENT}</code>" not in html and f">{ABSENT}</td>" in html
    # Cells wrap only where the text has spaces: the table's class is not the old one that
    # let the site's stylesheet break code anywhere, and no note list when nothing raised.
    assert 'class="remat-table remat-versions"' in html and "versions-table" not in html
    assert "<ol" not in html and table.notes == []
    lines = str(table).splitlines()
    assert lines[0].split() == ["parameter", "changed", "0.1.0", "0.2.0", "0.3.0"]
    assert lines[-1].split()[:2] == ["concrete", "yes"] and lines[2].split()[1] != "yes"


def helpers_headers(html: str) -> list[str]:
    return re.findall(r'<th class="col_heading[^"]*" >([^<]*)</th>', html)


def test_a_table_with_no_changed_row_has_no_mark_column():
    table = versions.comparison_table("item", ["1", "2"], [("a", ["x", "x"]), ("b", [True, True])])
    assert helpers_headers(table._repr_html_()) == ["item", "1", "2"]
    assert str(table).splitlines()[-1].split() == ["b", "True", "True"]


def test_an_error_cell_shows_the_type_and_the_note_under_the_table_the_whole_message():
    message = ("The `concrete` option to `jax.checkpoint` was deprecated in JAX v0.8.2, and removed in "
               "JAX v0.10.0. In its place please use `static_argnums`.")
    rows = [("concrete=True", [f"raises NotImplementedError: {message}",
                               "raises TypeError: checkpoint() got an unexpected keyword argument 'concrete'"]),
            ("concrete=False", [f"raises NotImplementedError: {message}",
                                "raises TypeError: checkpoint() got an unexpected keyword argument 'concrete'"]),
            ("policy='dots'", ["raises TypeError: 'str' object is not callable", "ok"]),
            ("bare", ["raises KeyError", "ok"])]
    table = versions.comparison_table("call", ["0.1", "0.2"], rows)
    # Equal messages share a note; notes are numbered in the order the cells meet them.
    assert table.notes == [f"NotImplementedError: {message}",
                           "TypeError: checkpoint() got an unexpected keyword argument 'concrete'",
                           "TypeError: 'str' object is not callable"]
    html = table._repr_html_()
    anchor = re.search(r'href="#(versions-note-[0-9a-f]+)-1"', html)[1]
    # On a phone the older release's column folds away (remat-extra); the newest shows.
    assert (f'<td class="data row0 col2 remat-extra" ><code>Not<wbr>Implemented<wbr>Error</code> '
            f'<a href="#{anchor}-1">[1]</a></td>') in html
    assert f'<td class="data row1 col3" ><code>Type<wbr>Error</code> <a href="#{anchor}-2">[2]</a></td>' in html
    assert (f'<td class="data row2 col2 remat-extra" ><code>Type<wbr>Error</code> '
            f'<a href="#{anchor}-3">[3]</a></td>') in html
    # No cell holds a message; the notes, after the table, hold each message once, escaped.
    cells = re.findall(r"<td[^>]*>(.*?)</td>", html)
    assert not any("deprecated" in cell or "unexpected" in cell for cell in cells)
    table_end = html.index("</table>")
    notes = html[table_end:]
    assert notes.count("<li") == 3 and f'<li id="{anchor}-1"><code>NotImplementedError</code>: ' in notes
    assert "removed in JAX v0.10.0. In its place please use `static_argnums`." in notes
    assert "got an unexpected keyword argument &#x27;concrete&#x27;" in notes
    # An exception recorded without a message is its type alone, with no note.
    assert '<td class="data row3 col2 remat-extra" ><code>Key<wbr>Error</code></td>' in html
    assert "anywhere" not in html
    # As text: the type and the note's number in the cell, the notes below the table.
    text = str(table).splitlines()
    assert text[2].split()[:4] == ["concrete=True", "yes", "NotImplementedError", "[1]"]
    assert text[-3] == f"[1] NotImplementedError: {message}"
    assert text[-1] == "[3] TypeError: 'str' object is not callable"
    # Without code, the type is plain text.
    plain = versions.comparison_table("call", ["0.1"], [("c", ["raises KeyError: k"])], code=False)
    assert ">Key<wbr>Error <a href=" in plain._repr_html_()
    # The same table gets the same anchors on every build; another table gets others.
    assert versions.comparison_table("call", ["0.1", "0.2"], rows)._repr_html_() == html
    assert anchor not in plain._repr_html_()


def test_short_values_and_error_parts():
    assert versions.error_parts("raises jax.errors.TracerBoolConversionError: Attempted boolean") == (
        "jax.errors.TracerBoolConversionError", "Attempted boolean")
    assert versions.error_parts("raises ValueError: a\nb") == ("ValueError", "a\nb")
    assert versions.error_parts("raised nothing") is None and versions.error_parts(3) is None
    assert [versions.short_value(v) for v in (["remat2"], False, 12, {"a": 1}, "raises E: m")] == [
        "remat2", "False", "12", '{"a": 1}', "E"]


def test_the_table_escapes_values_and_checks_their_count():
    table = versions.comparison_table("item", ["1", "2"], [("a<b", ["x", "<y>"])])._repr_html_()
    assert '<td class="data row0 col0 remat-changed" >a&lt;b</td>' in table
    assert '<td class="data row0 col3" ><code>&lt;y&gt;</code></td>' in table
    assert "<code>" not in versions.comparison_table("item", ["1"], [("a", ["x"])], code=False)._repr_html_()
    with pytest.raises(ValueError, match="versions"):
        versions.comparison_table("item", ["1"], [("a", ["x", "y"])])
    with pytest.raises(ValueError, match="non-empty"):
        versions.comparison_table("item", [], [])


def test_counts_are_the_numbers_the_prose_quotes(report):
    assert report.counts("checkpoint_parameters") == {"0.1.0": 2, "0.2.0": 3, "0.3.0": 2}
    assert report.counts("policies", "names") == {"0.1.0": 2, "0.2.0": 3, "0.3.0": 2}
    assert report.counts("ad_checkpoint_exports") == {"0.1.0": 1, "0.2.0": 2, "0.3.0": 2}
    with pytest.raises(LookupError, match="JAX 0.1.0 has no missing"):
        report.counts("missing")
    broken = VersionReport({"0.1.0": _document("0.1.0", policies={"error": "TypeError: no"})})
    with pytest.raises(LookupError, match="policies/names"):
        broken.counts("policies", "names")


def test_an_item_missing_in_a_version_is_absent(report):
    assert report.row(report.policy_rows(), "SaveNames") == {"0.1.0": ABSENT, "0.2.0": "class", "0.3.0": ABSENT}
    assert report.versions_where(report.parameter_rows("checkpoint_parameters"), "concrete",
                                 lambda v: v != ABSENT) == ["0.2.0"]
    older = {key: value for key, value in _document("0.0.1").items() if key != "remat_is_checkpoint"}
    sparse = VersionReport({"0.0.1": older, "0.1.0": _document("0.1.0")})
    assert sparse.remat_rows()[0] == ("jax.remat is jax.checkpoint", [ABSENT, False])
    assert sparse.item("remat_is_checkpoint") == {"0.0.1": ABSENT, "0.1.0": False}
    assert sparse.row(sparse.remat3_rows(), "primitive (flag on)") == {"0.0.1": ABSENT, "0.1.0": ABSENT}


def test_error_items_record_the_exception_as_a_call_that_raised(report):
    saved = report.residual_rows()
    assert saved == [
        ("policy=None", ["x", "x", "x · 'a'"]),
        ("SaveNames", [ABSENT, "raises TypeError: SaveNames() takes no arguments", ABSENT]),
    ]
    assert residual_summary({"error": "E: m"}) == "raises E: m"
    assert residual_summary([]) == "(nothing)"
    assert residual_summary(["f32<host>[2,3] named 'a'", "weird line"]) == "host:'a' · weird line"
    with pytest.raises(TypeError, match="lines"):
        residual_summary("f32[3] named 'a'")
    # A whole probe item that failed in one version shows its error in every row of that version.
    failed = VersionReport({"0.1.0": _document("0.1.0"),
                            "0.2.0": _document("0.2.0", policies={"error": "AttributeError: gone"})})
    assert failed.row(failed.policy_rows(), "nothing_saveable") == {"0.1.0": "function",
                                                                    "0.2.0": "raises AttributeError: gone"}
    assert failed.row(failed.policy_rows(), "number of names") == {"0.1.0": 2,
                                                                   "0.2.0": "raises AttributeError: gone"}
    # In a table, the failed item shows its type, and the note its message.
    table = failed.table("policies", failed.policy_rows())
    assert table.notes == ["AttributeError: gone"] and "<code>Attribute<wbr>Error</code> <a" in table._repr_html_()


def test_the_report_describes_each_environment_and_checks_its_input(report):
    assert report.environments().splitlines() == [
        f"JAX {v}, jaxlib {v}, Python 3.13, backend: cpu" for v in report.versions]
    with pytest.raises(LookupError, match="no row 'nope'"):
        report.row(report.behaviour_rows(), "nope")
    with pytest.raises(ValueError, match="at least one"):
        VersionReport({})
    with pytest.raises(TypeError, match="mapping"):
        VersionReport([("0.1.0", {})])
    with pytest.raises(TypeError, match="0.1.0"):
        VersionReport({"0.1.0": ["not", "a", "document"]})


def test_words_for_the_prose():
    assert versions.join_versions(["0.10.2", "0.11.2", "0.12.0.1"]) == "0.10.2, 0.11.2 and 0.12.0.1"
    assert versions.join_versions(["0.10.2", "0.11.2"]) == "0.10.2 and 0.11.2"
    with pytest.raises(ValueError):
        versions.join_versions([])
    assert [versions.count_in_words(n) for n in (0, 2, 3, 12, 13)] == ["zero", "two", "three", "twelve", "13"]
    for bad in (-1, 2.0, True):
        with pytest.raises(ValueError):
            versions.count_in_words(bad)


# --- the interpreters ------------------------------------------------------------------------

def _fake_env(envs: pathlib.Path, version: str, script: str = "") -> pathlib.Path:
    python = envs / version / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(script)
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python


def test_interpreters_are_the_version_folders_sorted_by_version_then_the_running_jax(tmp_path, monkeypatch):
    for version in ("0.11.2", "0.9.0", "0.10.2"):
        _fake_env(tmp_path, version)
    (tmp_path / ".installed").touch()  # the Makefile's stamp
    (tmp_path / "not-a-version").mkdir()
    monkeypatch.setenv(versions.ENVS_VARIABLE, str(tmp_path))
    found = versions.find_interpreters()
    assert list(found) == ["0.9.0", "0.10.2", "0.11.2", jax.__version__]
    assert found["0.10.2"] == tmp_path / "0.10.2" / "bin" / "python"
    assert found[jax.__version__] == pathlib.Path(sys.executable)
    assert versions.find_interpreters(tmp_path) == found
    assert sorted(["0.10.2", "0.9.0", "0.12.0.1", "0.11.2"], key=versions.version_key) == [
        "0.9.0", "0.10.2", "0.11.2", "0.12.0.1"]
    with pytest.raises(ValueError, match="digits"):
        versions.version_key("0.5.0rc1")


def test_an_unset_variable_says_which_variable_and_to_run_make_html(monkeypatch):
    monkeypatch.delenv(versions.ENVS_VARIABLE, raising=False)
    with pytest.raises(RuntimeError, match=r"REMAT_GUIDE_JAX_ENVS is not set.*make html"):
        versions.find_interpreters()
    monkeypatch.setenv(versions.ENVS_VARIABLE, "")
    with pytest.raises(RuntimeError, match="REMAT_GUIDE_JAX_ENVS is not set"):
        versions.find_interpreters()


def test_a_missing_environment_is_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match=r"not a folder.*make html"):
        versions.find_interpreters(tmp_path / "nowhere")
    with pytest.raises(RuntimeError, match=r"No environment of an older JAX.*make html"):
        versions.find_interpreters(tmp_path)
    _fake_env(tmp_path, "0.10.2")
    (tmp_path / "0.11.2").mkdir()  # an environment that was never finished
    with pytest.raises(RuntimeError, match=r"No interpreter for JAX 0\.11\.2 .*make html"):
        versions.find_interpreters(tmp_path)


def test_a_folder_for_the_running_jax_is_refused(tmp_path):
    _fake_env(tmp_path, jax.__version__)
    with pytest.raises(RuntimeError, match=f"environment for JAX {jax.__version__}"):
        versions.find_interpreters(tmp_path)


def test_run_probes_checks_each_interpreter_reports_its_folder_s_version(tmp_path):
    # Fake interpreters: shell scripts that print a document (or fail) whatever they are asked to run.
    wrong = _fake_env(tmp_path, "0.1.0", '#!/bin/sh\necho \'{"jax": "0.2.0", "backend": "cpu"}\'\n')
    with pytest.raises(RuntimeError, match=r"listed for JAX 0\.1\.0 .* runs JAX 0\.2\.0"):
        versions.run_probes({"0.1.0": wrong})
    right = _fake_env(tmp_path, "0.3.0", '#!/bin/sh\necho \'{"jax": "0.3.0", "backend": "cpu"}\'\n')
    assert versions.run_probes({"0.3.0": right}) == {"0.3.0": {"jax": "0.3.0", "backend": "cpu"}}
    gpu = _fake_env(tmp_path, "0.4.0", '#!/bin/sh\necho \'{"jax": "0.4.0", "backend": "gpu"}\'\n')
    with pytest.raises(RuntimeError, match="ran on 'gpu'"):
        versions.run_probes({"0.4.0": gpu})
    broken = _fake_env(tmp_path, "0.5.0", "#!/bin/sh\necho 'ModuleNotFoundError: jax' >&2\nexit 1\n")
    with pytest.raises(RuntimeError, match=r"failed under JAX 0\.5\.0 .*exit status 1: ModuleNotFoundError: jax"):
        versions.run_probes({"0.5.0": broken})


# --- the probe stays a script for environments that hold JAX alone --------------------------

def test_the_probe_imports_only_the_standard_library_and_jax():
    assert versions.third_party_imports(version_probe.__file__) == ["jax"]
    moved = {"ABSENT", "residual_summary", "comparison_table", "changed_rows", "_values_differ"}
    assert not moved & set(vars(version_probe)), "the page's helpers live in remat_guide.site.versions"


def test_the_page_module_imports_no_notebook_machinery_at_module_level():
    tree = ast.parse(pathlib.Path(versions.__file__).read_text(encoding="utf-8"))
    top = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            top.add(node.module.split(".")[0])
    allowed = set(sys.stdlib_module_names) | {"jax", "numpy", "pandas", "remat_guide"}
    assert top <= allowed, top - allowed


# --- the real probe --------------------------------------------------------------------------

def test_a_report_of_the_real_probe_for_the_running_jax():
    document = version_probe.probe()
    report = VersionReport({jax.__version__: document})
    params = report.parameter_rows("checkpoint_parameters")
    assert [label for label, _ in params] == list(inspect.signature(jax.checkpoint).parameters)
    assert report.counts("checkpoint_parameters") == {jax.__version__: len(params)}
    names = sorted(n for n in dir(jax.checkpoint_policies) if not n.startswith("_"))
    assert report.counts("policies", "names") == {jax.__version__: len(names)}
    saved = report.residual_rows()
    assert sorted(label for label, _ in saved) == sorted(names + ["(no checkpoint)", "policy=None"])
    assert report.row(saved, "nothing_saveable") == {jax.__version__: "x w q img ker"}
    for rows in (params, report.behaviour_rows(), report.remat_rows(), report.policy_rows(), saved,
                 report.residual_rows(remat3=True), report.remat3_rows(), report.name_rows(),
                 report.format_rows()):
        assert rows and changed_rows(rows) == []  # one version: nothing differs
        assert all(ABSENT not in values for _, values in rows), rows
        assert "remat-changed" not in report.table("item", rows)._repr_html_()
    assert report.environments().startswith(f"JAX {jax.__version__}, jaxlib ")


# --- the summary of what changed -------------------------------------------------------------

def test_each_step_lists_what_appeared_disappeared_and_changed(report):
    first, second = report.changes()
    assert (first.before, first.after, second.before, second.after) == ("0.1.0", "0.2.0", "0.2.0", "0.3.0")
    assert first.new == [
        "parameter [`concrete`](param-concrete-removed) of [`jax.checkpoint`](reference-parameters)",
        "in [`jax.checkpoint_policies`](api-checkpoint_policies): `SaveNames`",
        "[`jax.ad_checkpoint.name_p`](api-name_p)"]
    assert first.gone == []
    assert first.changed == [
        "[`concrete=True`](param-concrete-removed): `ok` → `TypeError`",
        "[`dots_saveable`](policy-dots_saveable): `function` → `instance of Dots`"]
    assert second.new == []
    assert second.gone == [
        "parameter [`concrete`](param-concrete-removed) of [`jax.checkpoint`](reference-parameters)",
        "in [`jax.checkpoint_policies`](api-checkpoint_policies): `SaveNames`"]
    assert second.changed == [
        "[`concrete=True`](param-concrete-removed): `TypeError` → `ok`",
        "[`dots_saveable`](policy-dots_saveable): `instance of Dots` → `function`",
        "what is saved with `policy=None`"]
    summary = report.summary().splitlines()
    assert summary[0] == "- **0.1.0 → 0.2.0**" and summary[3] == "- **0.2.0 → 0.3.0**"
    assert summary[1] == "  - New: " + "; ".join(first.new) + "."
    assert summary[2] == "  - Changed: " + "; ".join(first.changed) + "."
    assert summary[4].startswith("  - Gone: ") and summary[5].startswith("  - Changed: ")
    with pytest.raises(ValueError, match="0.9"):
        report.step("0.9", "0.1.0")


def test_a_step_groups_rows_that_change_alike_and_names_aliases_once():
    def kinds(kind: str, made: str) -> dict:
        return {"namespace_type": "SimpleNamespace", "import_as_module": "ok",
                "names": ["checkpoint_dots", "dots_saveable", "save_only_these_names"],
                "aliases": [["checkpoint_dots", "dots_saveable"]],
                "kinds": {"checkpoint_dots": kind, "dots_saveable": kind, "save_only_these_names": "function"},
                "made": {"save_only_these_names": made}}

    old = _document("0.1.0", policies=kinds("instance of Dots", "instance of SaveOnly"),
                    behaviour={"concrete=True": "raises NotImplementedError: removed",
                               "concrete=False": "raises NotImplementedError: removed"},
                    remat_parameters=[_param("prevent_cse", default="True", annotation="bool")],
                    config_flags={"jax_remat3": False, "jax_old": True},
                    top_level_names=["checkpoint", "custom_remat", "remat"])
    new = _document("0.2.0", policies=kinds("function", "function"),
                    behaviour={"concrete=True": "raises TypeError: unknown",
                               "concrete=False": "raises TypeError: unknown"},
                    remat_parameters=[_param("prevent_cse", default="True", annotation="bool | Sequence[bool]")],
                    config_flags={"jax_remat3": True},
                    remat3={"exists": True, "primitive (flag off)": ["remat3"], "residuals": {}},
                    residual_line_format="f32[3] cos at <file>")
    step = VersionReport({"0.1.0": old, "0.2.0": new}).step("0.1.0", "0.2.0")
    assert step.gone == ["flag `jax_old`", "`jax.custom_remat`"]
    assert step.changed == [
        "[`prevent_cse`](param-prevent_cse) of [`jax.remat`](reference-remat): `bool` → `bool | Sequence[bool]`",
        "[`concrete=True`](param-concrete-removed) and [`concrete=False`](param-concrete-removed): "
        "`NotImplementedError` → `TypeError`",
        "[`dots_saveable`](policy-dots_saveable) (and its alias): `instance of Dots` → `function`",
        "what [`save_only_these_names(...)`](policy-save_only_these_names) returns: "
        "an instance of a class → `function`",
        "under [`jax_remat3`](flag-jax_remat3), primitive (flag off): `remat2` → `remat3`",
        "the default of [`jax_remat3`](flag-jax_remat3): `False` → `True`",
        "the layout of a line of a residual listing"]
    same = VersionReport({"0.1.0": _document("0.1.0"), "0.2.0": _document("0.2.0")})
    assert same.summary() == "- **0.1.0 → 0.2.0**: no difference"
    assert VersionReport({"0.1.0": _document("0.1.0")}).summary() == ""


def test_many_changed_residual_rows_are_counted_not_named():
    def residuals(suffix: str) -> dict:
        rows = {f"p{i}": [f"f32[3] named '{suffix}{i}'"] for i in range(5)}
        return {"(no checkpoint)": ["f32[3] from the argument x"], **rows}

    old = _document("0.1.0", remat3={"exists": True, "residuals": residuals("a")})
    new = _document("0.2.0", remat3={"exists": True, "residuals": {**residuals("b"), "p9": []}})
    step = VersionReport({"0.1.0": old, "0.2.0": new}).step("0.1.0", "0.2.0")
    assert step.changed == ["what is saved under [`jax_remat3`](flag-jax_remat3) (5 of the 6 rows both have)"]


def test_api_names_link_by_the_site_s_rule():
    assert versions.api_label("concrete=True") == "param-concrete-removed"
    assert versions.api_label("jax.remat(static_argnames='flag')") == "reference-remat"
    assert versions.api_label("policy=jax.checkpoint_policies.dots_saveable") == "policy-dots_saveable"
    assert versions.api_label("jax.ad_checkpoint.name_p") == "api-name_p"
    assert versions.api_label("jax_remat3") == "flag-jax_remat3"
    for plain in ("policy=None", "SaveOnlyTheseNames", "jax.custom_remat", "fun", "ok"):
        assert versions.api_label(plain) is None, plain


def test_long_values_wrap_between_words_not_inside_them():
    table = versions.comparison_table("item", ["1", "2"], [
        ("factory", ["function", "instance of SaveAndOffloadOnlyTheseNames"]),
        ("type", ["jax.checkpoint_policies", "raises ModuleNotFoundError: gone"])])
    html = table._repr_html_()
    assert "Save<wbr>And<wbr>Offload<wbr>Only<wbr>These<wbr>Names" in html
    assert "jax.<wbr>checkpoint_<wbr>policies" in html
    assert "<code>Module<wbr>Not<wbr>Found<wbr>Error</code>" in html
    assert "<wbr>" not in str(table)
