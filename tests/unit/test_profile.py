"""The estimate held against an H200's profile: programs the GPU compiled, read kernel by kernel.

``docs/_hardware/h200-2026-11-30-*`` holds what ``benchmarks/profile_on_gpu.py`` measured
and the HLO of every program as the device compiled it, autotuning on: there XLA hands
most dots to cuBLAS as custom calls, which the ahead-of-time programs never show.
"""

import importlib.util
import pathlib
import sys

import pytest

from remat_guide.site import hardware, profile
from remat_guide.targets import estimate_step, kernel_times


def test_cublas_matmuls_in_a_program_the_gpu_compiled_count_the_flops_of_the_same_program_compiled_here():
    text = profile.hlo("kernels", "large_bf16", "none")
    assert 'custom_call_target="__cublas$lt$matmul"' in text
    counted = sum(kernel.flops for kernel in kernel_times(text, "h200"))
    assert counted == pytest.approx(hardware._compiled("large_bf16", "none").matmul_flops, rel=1e-3)


def test_each_kernels_time_adds_up_to_the_steps_kernel_time():
    text = profile.hlo("profile", "large", "offload_dot_with_no_batch_dims")
    times = kernel_times(text, "h200")
    assert sum(kernel.seconds for kernel in times) == pytest.approx(estimate_step(text, "h200").kernel_seconds)
    assert [kernel.seconds for kernel in times] == sorted((kernel.seconds for kernel in times), reverse=True)
    assert all(kernel.count >= 1 and kernel.seconds > 0 for kernel in times)


def test_the_profile_joins_nearly_every_measured_microsecond_to_an_estimated_kernel():
    for stage, policy in (("llama1b", "full"), ("wide", "none"), ("large_bf16", "nothing_saveable")):
        frame = profile.kernel_comparison(stage, policy)
        unjoined = frame[frame.kernel == "measured kernels the estimate has none of"].measured.sum()
        assert unjoined < 0.01 * frame.measured.sum(), (stage, policy)
        assert frame.measured.sum() <= profile.steps(("kernels",)).set_index(["stage", "policy"]).step[
            stage, policy]


def test_a_loop_fusion_that_reads_across_a_transpose_moves_a_sector_per_element_as_the_h200_ran_it():
    kernels = profile.kernel_comparison("llama1b", "full").set_index("kernel")
    strided = kernels[kernels.strided > 0]
    # The three loop fusions of the attention's transposes, and nothing else, read across one.
    assert sorted(strided.index) == ["loop_transpose_fusion", "loop_transpose_fusion.1", "loop_transpose_fusion.2"]
    # bf16 scores, 8 x 4 x 4096 x 4096 per layer, read one element per 32-byte sector: 16x the bytes.
    assert strided.strided["loop_transpose_fusion.1"] == 16 * 8 * 4 * 4096 * 4096 * (32 - 2)
    for name, kernel in strided.iterrows():
        # Counted by their bytes alone these kernels ran 4-7x longer than estimated; with the
        # sectors, within a quarter of what the H200 measured, and above it.
        assert kernel.measured > 4 * kernel.by_bytes, name
        assert kernel.measured < kernel.estimated < 1.25 * kernel.measured, name
    # The transposes that XLA's transpose emitter stages through shared memory read whole sectors.
    transposes = kernels[kernels.index.str.startswith("input_transpose_fusion")]
    assert len(transposes) and (transposes.strided == 0).all()


def test_kernel_times_refuses_what_is_not_a_program():
    with pytest.raises(TypeError, match="program"):
        kernel_times(3, "h200")
    with pytest.raises(ValueError, match="target"):
        kernel_times("", "h300")


@pytest.fixture(scope="module")
def profile_script():
    root = pathlib.Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("profile_on_gpu", root / "benchmarks" / "profile_on_gpu.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(root / "benchmarks"))
    return module


def test_the_profiling_script_names_a_kernel_by_its_instruction_or_inside_a_command_buffer_by_its_own_name(
        profile_script):
    # (module, hlo_op, kernel, start ns, duration ns, stream): two steps of three kernels and a copy.
    events = [("jit_step", "fusion.1", "loop_add_fusion", 0, 4000, "Stream #14(Compute)"),
              ("jit_step", "command_buffer_3", "gemm_fusion_dot", 5000, 10000, "Stream #14(Compute)"),
              ("jit_step", "command_buffer_3", "loop_transpose_fusion", 15000, 6000, "Stream #14(Compute)"),
              ("jit_step", "copy-start", "MemcpyD2H", 15000, 8000, "Stream #73(MemcpyD2H)")]
    events += [(m, op, k, start + 100_000, d, line) for m, op, k, start, d, line in events]
    found = profile_script.by_op(events, steps=2)
    assert found["ops"]["fusion.1"][:2] == [4.0, 1.0]  # microseconds and runs per step
    assert found["ops"]["gemm_fusion_dot"][:2] == [10.0, 1.0]
    assert found["ops"]["loop_transpose_fusion"][:2] == [6.0, 1.0]
    assert found["kernel_ms"] == pytest.approx(0.020)  # every kernel, the copy left out
    assert found["span_ms"] == pytest.approx(0.0615)  # 123 microseconds over 2 steps
    assert found["lines"] == ["Stream #14(Compute)", "Stream #73(MemcpyD2H)"]
