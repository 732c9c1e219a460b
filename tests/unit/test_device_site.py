"""The device page's helpers: the probe's program is the page's, its results load, the H200's peaks add up."""

import importlib.util
import json
import pathlib

import jax
import pytest

from remat_guide.site import device

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = {"width": 16, "depth": 2, "batch": 4}


@pytest.fixture(scope="module")
def probe_script():
    spec = importlib.util.spec_from_file_location("device_probe", ROOT / "benchmarks" / "device_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_probe_measures_the_pages_program(probe_script):
    step, *args = probe_script.mlp_step(**TINY)
    step_for, site_args = device.mlp_program(**TINY)
    assert str(jax.make_jaxpr(step)(*args)) == str(jax.make_jaxpr(step_for(None))(*site_args))
    other = device.mlp_program(width=16, depth=3, batch=4)[0](None)
    assert str(jax.make_jaxpr(step)(*args)) != str(jax.make_jaxpr(other)(*device.mlp_program(16, 3, 4)[1]))


def test_the_probe_runs_a_donated_step_here(probe_script):
    record = probe_script.step_child(TINY, "0,1", True)
    assert record["donate_argnums"] == [0, 1]
    assert record["alias_size_in_bytes"] > 0
    assert record["predicted_device_bytes"] == (record["argument_size_in_bytes"] + record["output_size_in_bytes"]
                                                + record["temp_size_in_bytes"] - record["alias_size_in_bytes"])
    assert len(record["losses"]) == probe_script.STEPS
    if jax.devices()[0].platform == "cpu":
        assert record["peak_after_steps"] is None and record["autotune"] is None


def _fixture(tmp_path, stats=True):
    """A probe result shaped as the script writes it, with a GPU's allocator figures."""
    def row(donate, alias, temp, peak):
        return {"donate_argnums": donate, "autotune": False, "argument_size_in_bytes": 1000,
                "output_size_in_bytes": 900, "alias_size_in_bytes": alias, "temp_size_in_bytes": temp,
                "host_temp_size_in_bytes": 0, "peak_memory_in_bytes": 1, "predicted_device_bytes": 0,
                "in_use_args": 1024 if stats else None, "peak_after_compile": 1024 if stats else None,
                "peak_after_steps": peak if stats else None}
    found = {"device_kind": "NVIDIA H200", "measured_on": "2099-01-01", "method": "fixture",
             "software": {"jax": "0.0"}, "rows": [row([], 0, 50, 1974), row([0, 1], 896, 120, 1148),
                                                  {"donate_argnums": [0, 1], "autotune": True, "error": "OOM"}],
             "limits": {"default": {"stats": {"bytes_limit": 75, "bytes_in_use": 1}}, "other": {"error": "x"}}}
    path = tmp_path / "h200-2099-01-01-probe.json"
    path.write_text(json.dumps(found), encoding="utf-8")
    (tmp_path / "h200-2099-01-01.json").write_text("{}", encoding="utf-8")
    return path


def test_a_probe_result_loads_with_its_prediction_and_peak(tmp_path):
    path = _fixture(tmp_path)
    assert device.probe_files(tmp_path) == [path]
    frame = device.probe(path)
    assert list(frame["donate"]) == ["none", "(0, 1)", "(0, 1)"]
    assert list(frame["predicted"][:2]) == [1000 + 900 + 50, 1000 + 900 + 120 - 896]
    assert list(frame["others"][:2]) == [24, 24]
    assert list(frame["peak"][:2]) == [1974, 1148]
    assert frame["error"].iloc[2] == "OOM"
    limits = device.probe_limits(path)
    assert limits["bytes_limit"].iloc[0] == 75 and limits["bytes_limit"].isna().iloc[1]
    assert limits["error"].iloc[1] == "x"


def test_a_cpu_probe_result_has_no_peak(tmp_path):
    frame = device.probe(_fixture(tmp_path, stats=False))
    assert frame["peak"].isna().all() and frame["others"].isna().all()


def test_a_file_that_is_not_a_probe_result_is_refused(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"rows": []}), encoding="utf-8")
    with pytest.raises(ValueError, match="not a device_probe.py result"):
        device.probe(path)


def test_the_h200s_peaks_are_the_donated_sum_for_large_programs():
    peaks = device.h200_peaks()
    size = peaks["program"].str.split(" / ").str[0]
    exact = peaks[size.isin(["large", "large_bf16", "llama1b"])]
    assert len(exact) == 16
    assert (exact["gap"].abs() < 1024).all()
    llama = peaks[size == "llama1b"]
    assert (llama["predicted"] < llama["in_use_args"] + device.llama_state_bytes()).all()  # aliasing counted once
