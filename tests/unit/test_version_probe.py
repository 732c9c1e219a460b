"""The probe behind the "What changed across versions" page reports the installed JAX faithfully."""

import contextlib
import inspect
import io
import json
import os
import pathlib
import re
import subprocess

import jax
import pytest

from remat_guide.site import version_probe


@pytest.fixture(scope="module")
def document():
    """The probe's JSON document for the JAX of this interpreter, as ``main`` prints it."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert version_probe.main([]) == 0
    return json.loads(out.getvalue()), out.getvalue()


def test_document_names_the_installed_jax_and_has_no_addresses_or_paths(document):
    doc, text = document
    assert doc["jax"] == jax.__version__
    assert doc["backend"] == jax.default_backend()
    assert re.search(r"0x[0-9a-fA-F]", text) is None
    assert str(pathlib.Path(version_probe.__file__).parent) not in text
    assert "site-packages" not in text


def test_every_policy_of_the_installed_jax_is_listed_and_probed(document):
    doc, _ = document
    names = sorted(n for n in dir(jax.checkpoint_policies) if not n.startswith("_"))
    assert doc["policies"]["names"] == names
    assert sorted(doc["residuals"]) == sorted(names + ["(no checkpoint)", "policy=None"])
    for name in names:
        lines = doc["residuals"][name]
        assert isinstance(lines, list), (name, lines)  # an error would be a dict
        assert all(" from " not in line or "from the argument" in line for line in lines), lines


def test_aliases_are_exactly_the_identical_pairs(document):
    doc, _ = document
    cp = jax.checkpoint_policies
    names = doc["policies"]["names"]
    expected = [[a, b] for i, a in enumerate(names) for b in names[i + 1:]
                if getattr(cp, a) is getattr(cp, b)]
    assert doc["policies"]["aliases"] == expected


def test_signatures_match_inspect(document):
    doc, _ = document
    for key, fn in (("checkpoint_parameters", jax.checkpoint), ("remat_parameters", jax.remat)):
        params = inspect.signature(fn).parameters.values()
        assert [p["name"] for p in doc[key]] == [p.name for p in params]
        assert [p["kind"] for p in doc[key]] == [p.kind.name for p in params]
    assert doc["remat_is_checkpoint"] == (jax.remat is jax.checkpoint)


def test_residuals_follow_the_policy():
    args = version_probe.probe_args()
    cp = jax.checkpoint_policies
    nothing = version_probe.residual_lines(jax.checkpoint(version_probe.probe_fn,
                                                          policy=cp.nothing_saveable), *args)
    named = version_probe.residual_lines(jax.checkpoint(version_probe.probe_fn,
                                                        policy=cp.save_only_these_names("a")), *args)
    assert all("from the argument" in line for line in nothing)
    assert [line for line in named if line not in nothing] == ["f32[2,3] named 'a'"]


def test_flags_and_exports_match_the_installed_jax(document):
    doc, _ = document
    assert set(doc["config_flags"]) == {n for n in jax.config.values
                                        if "remat" in n or "checkpoint" in n}
    import jax.ad_checkpoint as ac
    assert set(doc["ad_checkpoint_exports"]) == {n for n in dir(ac) if not n.startswith("_")}


def test_one_failing_item_is_recorded_not_raised():
    def boom():
        raise ValueError("at 0x7f00deadbeef in /usr/lib/python3/x.py")

    assert version_probe._item(boom) == {"error": "ValueError: in x.py"}


def test_summary_and_table_helpers():
    assert version_probe.residual_summary([]) == "(nothing)"
    assert version_probe.residual_summary({"error": "E: m"}) == "E: m"
    with pytest.raises(TypeError, match="lines"):
        version_probe.residual_summary("f32[3] named 'a'")
    table = version_probe.comparison_table("item", ["1", "2"], [("a<b", ["x", "<y>"])])._repr_html_()
    assert '<td class="data row0 col0 remat-changed" >a&lt;b</td>' in table
    assert '<td class="data row0 col2" ><code>&lt;y&gt;</code></td>' in table
    assert '<td class="data row0 col3 remat-changed" >changed</td>' in table
    with pytest.raises(ValueError, match="versions"):
        version_probe.comparison_table("item", ["1"], [("a", ["x", "y"])])


def test_probe_runs_as_a_script_under_jax_0_10_2():
    envs = os.environ.get("REMAT_GUIDE_JAX_ENVS")
    assert envs, "REMAT_GUIDE_JAX_ENVS is not set: run `make jax-envs` (the Makefile sets it)"
    python = pathlib.Path(envs, "0.10.2", "bin", "python")
    assert python.is_file(), f"{python} does not exist: run `make jax-envs`"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env["JAX_PLATFORMS"] = "cpu"
    run = subprocess.run([str(python), version_probe.__file__], capture_output=True, check=True,
                         text=True, env=env)
    doc = json.loads(run.stdout)
    assert doc["jax"] == "0.10.2"
    assert "0x" not in run.stdout
    assert len(doc["policies"]["names"]) == len(doc["residuals"]) - 2
    assert all(isinstance(lines, list) for lines in doc["residuals"].values())
