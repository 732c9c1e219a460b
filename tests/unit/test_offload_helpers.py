"""The offloading page's helpers: host transfers read from compiled HLO, and the H200's measured offloading pairs."""

import jax
import jax.numpy as jnp
import pytest
from jax.ad_checkpoint import checkpoint_name

from remat_guide.site import hardware, offload
from remat_guide.targets import place

SCHEDULED = """\
HloModule jit_f, is_scheduled=true

%body (p: (s32[], f32[4,8]{1,0:S(5)})) -> (s32[], f32[4,8]{1,0:S(5)}) {
  %p = (s32[], f32[4,8]{1,0:S(5)}) parameter(0)
  %buf = f32[4,8]{1,0:S(5)} get-tuple-element(%p), index=1
  %w = f32[1,8]{1,0} fusion(%p), kind=kLoop, calls=%make
  %start = ((f32[4,8]{1,0:S(5)}, f32[1,8]{1,0}), f32[4,8]{1,0:S(5)}, u32[]) \
dynamic-update-slice-start(%buf, %w), metadata={op_name="jit(f)/jvp()/while/body/dus"}
  %g = f32[8,8]{1,0} fusion(%w), kind=kCustom, calls=%gemm
  %c = f32[8,8]{1,0} custom-call(%g), custom_call_target="x"
  %done = f32[4,8]{1,0:S(5)} dynamic-update-slice-done(%start)
  ROOT %t = (s32[], f32[4,8]{1,0:S(5)}) tuple(%i, %done)
}

ENTRY %main (a: f32[4,8]) -> f32[1,8] {
  %a = f32[4,8]{1,0:S(5)} parameter(0)
  %fusion-start = ((f32[4,8]{1,0:S(5)}, s32[]), f32[1,8]{1,0}, u32[]) fusion-start(%a), \
kind=kLoop, calls=%wrapped_dynamic-slice_computation, \
metadata={op_name="jit(f)/transpose(jvp())/ds"}
  %fusion-start.1 = ((f32[8]{0}), f32[8]{0}, u32[]) fusion-start(%a), kind=kLoop, calls=%other
  %fusion-done.1 = f32[8]{0} fusion-done(%fusion-start.1)
  %k = f32[8]{0} fusion(%fusion-done.1), kind=kLoop, calls=%kernel
  %fusion-done = f32[1,8]{1,0} fusion-done(%fusion-start)
  ROOT %copy = f32[1,8]{1,0} copy(%fusion-done)
}
"""


def test_host_transfers_pairs_each_start_with_its_done_and_counts_the_kernels_between():
    found = offload.host_transfers(SCHEDULED)
    assert found.to_dict("records") == [
        {"pass": "forward", "start": "dynamic-update-slice-start", "operation": "dynamic-update-slice",
         "direction": "to host", "kernels_between": 2, "in_loop_body": True},
        # fusion-start.1 moves no host buffer, and fusion-done.1 is not this start's done;
        # the one kernel between is %k (another asynchronous start is not counted)
        {"pass": "backward", "start": "fusion-start", "operation": "dynamic-slice",
         "direction": "from host", "kernels_between": 1, "in_loop_body": False},
    ]


def test_host_transfers_refuses_a_start_without_its_done_and_what_is_not_text():
    broken = SCHEDULED.replace("  %done = f32[4,8]{1,0:S(5)} dynamic-update-slice-done(%start)\n", "")
    with pytest.raises(ValueError, match="start has no done"):
        offload.host_transfers(broken)
    with pytest.raises(TypeError, match="text must be"):
        offload.host_transfers(b"HloModule")


def test_a_program_without_offloading_has_no_host_transfers():
    assert offload.host_transfers(SCHEDULED.replace("S(5)", "S(1)")).empty


def test_an_h100_compile_of_an_offloaded_scan_writes_in_the_forward_loop_and_reads_in_the_backward_one():
    def loss(ws, x):
        def layer(h, w):
            return jnp.tanh(checkpoint_name(h @ w, "hidden")) @ w.T, None
        policy = jax.checkpoint_policies.save_and_offload_only_these_names(
            names_which_can_be_saved=[], names_which_can_be_offloaded=["hidden"],
            offload_src="device", offload_dst="pinned_host")
        return jnp.sum(jax.lax.scan(jax.checkpoint(layer, policy=policy), x, ws)[0] ** 2)

    args = place((jax.ShapeDtypeStruct((2, 64, 64), jnp.float32), jax.ShapeDtypeStruct((8, 64), jnp.float32)),
                 "h100")
    compiled = jax.jit(jax.grad(loss)).lower(*args).compile(compiler_options={"xla_gpu_autotune_level": 0})
    found = offload.host_transfers(compiled.as_text())
    assert list(zip(found["pass"], found.direction)) == [("forward", "to host"), ("backward", "from host")]
    assert found.in_loop_body.all()


def test_the_measured_pairs_keep_and_offload_the_same_sizes_and_offloading_ran_slower():
    pairs = offload.measured_pairs()
    assert list(pairs.config) == [config for config, *_ in offload.MEASURED_PAIRS]
    assert (pairs.host_bytes > 0).all()
    assert (pairs.offloaded_seconds > pairs.kept_seconds).all()
    assert pairs.software.str.startswith("jax ").all()
    xl = pairs.set_index("config").loc["xl_bf16"]
    assert xl.host_bytes == 8 * 2**30
    link = hardware.measurement(hardware.TIMED)["host_link"]["1024MiB"]
    assert xl.link_seconds == pytest.approx(8 * 2**30 / 1e9 * (1 / link["d2h_GBps"] + 1 / link["h2d_GBps"]))
