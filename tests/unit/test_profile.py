"""The estimate held against an H200's profile: programs the GPU compiled, read kernel by kernel.

``docs/_hardware/h200-2026-11-30-*`` holds what ``benchmarks/profile_on_gpu.py`` measured
and the HLO of every program as the device compiled it, autotuning on: there XLA hands
most dots to cuBLAS as custom calls, which the ahead-of-time programs never show.
"""

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


def test_kernel_times_refuses_what_is_not_a_program():
    with pytest.raises(TypeError, match="program"):
        kernel_times(3, "h200")
    with pytest.raises(ValueError, match="target"):
        kernel_times("", "h300")
