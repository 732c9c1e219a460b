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

from remat_guide.site import version_probe, versions


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


def test_probe_runs_as_a_script_under_the_oldest_jax():
    older = [v for v in versions.find_interpreters() if v != jax.__version__]
    assert older, "no older JAX environment: run `make jax-envs` (requirements-jax-<version>.txt)"
    oldest = older[0]
    python = versions.find_interpreters()[oldest]
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env["JAX_PLATFORMS"] = "cpu"
    run = subprocess.run([str(python), version_probe.__file__], capture_output=True, check=True,
                         text=True, env=env)
    doc = json.loads(run.stdout)
    assert doc["jax"] == oldest
    assert "0x" not in run.stdout
    assert len(doc["policies"]["names"]) == len(doc["residuals"]) - 2
    assert all(isinstance(lines, list) for lines in doc["residuals"].values())
