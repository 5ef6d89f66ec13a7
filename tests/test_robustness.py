"""Threads, leaks, bitwise determinism and library swaps."""

import gc
import os
import subprocess
import sys
import tempfile
import threading

import pytest
import torch
from conftest import random, requires_gpu

import fused_ops_py as fo


def rope_of(x, r):
    """fused_rope of x and r as [1, tokens, 1, head_dim] (unsqueeze_dim=2),
    32 dimensions rotated by tables made from them (no gradient), both
    outputs flattened into one tensor."""
    cos, sin = x.detach()[:, :32].cos(), r.detach()[:, :32].sin()
    q_embed, k_embed = fo.fused_rope(x[None, :, None], r[None, :, None], cos, sin, unsqueeze_dim=2)
    return torch.cat([q_embed.flatten(), k_embed.flatten()])


# every op with its gradients, as f(x, residual, weight, bias) -> tensor
OPS = {
    "fused_bias_scale_relu": lambda x, r, w, b: fo.fused_bias_scale_relu(x, b, 0.5),
    "relu": lambda x, r, w, b: fo.relu(x),
    "square": lambda x, r, w, b: fo.square(x),
    "reduce_sum": lambda x, r, w, b: fo.reduce_sum(x),
    "fused_swiglu": lambda x, r, w, b: fo.fused_swiglu(x, r),
    "fused_geglu": lambda x, r, w, b: fo.fused_geglu(x, r),
    "fused_dyt": lambda x, r, w, b: fo.fused_dyt(x, w[:1] * 0.5, w, b),
    "fused_rope": lambda x, r, w, b: rope_of(x, r),
    "fused_layer_norm": lambda x, r, w, b: fo.fused_layer_norm(x, w, b),
    "fused_rms_norm": lambda x, r, w, b: fo.fused_rms_norm(x, w),
    "fused_add_layer_norm": lambda x, r, w, b: torch.cat(fo.fused_add_layer_norm(x, r, w, b, dropout_p=0.2)),
    "fused_add_rms_norm": lambda x, r, w, b: torch.cat(fo.fused_add_rms_norm(x, r, w)),
}


def inputs(device, dtype=torch.float32, rows=67, cols=300, seed=0):
    return [
        random(s, dtype, device, seed=seed + i).requires_grad_()
        for i, s in enumerate([(rows, cols), (rows, cols), (cols,), (cols,)])
    ]


def outputs_and_grads(name, tensors, seed=0):
    torch.manual_seed(seed)  # dropout: the same mask each time
    out = OPS[name](*tensors)
    grads = torch.autograd.grad(out.float().square().sum(), tensors, allow_unused=True)
    return [out.detach()] + [g for g in grads if g is not None]


@pytest.mark.parametrize("name", list(OPS))
def test_every_output_and_gradient_is_bitwise_deterministic(name, device):
    tensors = inputs(device, torch.bfloat16, rows=1031, cols=520)
    first = outputs_and_grads(name, tensors)
    for _ in range(3):
        again = outputs_and_grads(name, tensors)
        assert all(torch.equal(a, b) for a, b in zip(first, again))


def run_threads(target, count=8):
    errors = []

    def guarded(index):
        try:
            target(index)
        except Exception as error:  # collected, then raised in the main thread
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def test_eight_threads_get_correct_results(device):
    def work(index):
        stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        with torch.cuda.stream(stream) if stream is not None else _nothing():
            for step in range(20):
                tensors = inputs(device, seed=100 * index + step)
                x, r, w, b = tensors
                y, h = fo.fused_add_layer_norm(x, r, w, b)
                expected = torch.nn.functional.layer_norm(x.detach() + r.detach(), (300,), w.detach(), b.detach())
                torch.testing.assert_close(h, x.detach() + r.detach())
                torch.testing.assert_close(y, expected, atol=1e-5, rtol=1e-5)
                total = fo.reduce_sum(fo.fused_bias_scale_relu(x, b, 0.5))
                torch.testing.assert_close(total, torch.relu(x.detach() * 0.5 + b.detach()).sum(), rtol=1e-5, atol=1e-3)
                # calls of one signature share their plan's free structs
                with torch.no_grad():
                    torch.testing.assert_close(fo.fused_add_layer_norm(x, r, w, b)[0], expected, atol=1e-5, rtol=1e-5)
                    gelu = torch.nn.functional.gelu(x, approximate="tanh") * r
                    torch.testing.assert_close(fo.fused_geglu(x, r), gelu, atol=1e-5, rtol=1e-5)
                    target = torch.arange(x.shape[0], device=device) % x.shape[-1]
                    torch.testing.assert_close(
                        fo.fused_cross_entropy(x, target),
                        torch.nn.functional.cross_entropy(x, target),
                        atol=1e-5,
                        rtol=1e-5,
                    )
        if stream is not None:
            stream.synchronize()

    run_threads(work)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_error_messages_stay_in_their_thread():
    """The library's last-error text is thread-local: each thread's
    exception carries its own bad value, never another thread's."""
    from fused_ops_py._ffi import check, ffi, lib

    barrier = threading.Barrier(8)
    seen = {}

    def work(index):
        args = ffi.new("fo_square_forward_args *")
        args.struct_size = ffi.sizeof("fo_square_forward_args")
        args.rows = args.cols = args.x_row_stride = 1
        args.dtype = 100 + index
        barrier.wait()
        for _ in range(200):
            with pytest.raises(TypeError) as info:
                check(lib.fo_square_forward(args))
            seen.setdefault(index, set()).add(str(info.value))

    run_threads(work)
    for index, messages in seen.items():
        assert all(f"dtype={100 + index}" in m for m in messages), messages


def rss_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))


@pytest.mark.parametrize("calls", [100_000])
def test_no_leak_over_many_calls(calls, device):
    tensors = inputs(device, rows=4, cols=64)
    x, r, w, b = tensors

    def step():
        y, h = fo.fused_add_rms_norm(x, r, w)
        out = fo.fused_bias_scale_relu(y, b, 0.5)
        torch.autograd.grad(fo.reduce_sum(fo.square(out)) + h.sum(), tensors, allow_unused=True)

    for _ in range(2000):  # warm the allocators up
        step()
    gc.collect()
    rss, allocated = rss_kib(), (torch.cuda.memory_allocated(device) if device.type == "cuda" else 0)
    for _ in range(calls // 4):  # each step makes four op calls and their backwards
        step()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        assert torch.cuda.memory_allocated(device) == allocated
    # a leak of even 16 bytes a call would show as 1.5 MiB here
    assert rss_kib() - rss < 1536, f"RSS grew by {rss_kib() - rss} KiB"


def subprocess_with_library(code, path):
    env = dict(os.environ, FUSED_OPS_PY_LIBRARY=str(path))
    # from a neutral directory, so the installed package is the one imported
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tempfile.gettempdir()
    )


def cpu_only_library():
    path = os.environ.get("FO_TEST_CPU_ONLY_LIBRARY")
    if not path:
        pytest.skip("FO_TEST_CPU_ONLY_LIBRARY names no CPU-only build (scripts/test.sh sets it)")
    return path


def test_swap_to_a_cpu_only_build_really_loads_it():
    path = cpu_only_library()
    code = (
        "import torch, fused_ops_py as fo\nfrom fused_ops_py._ffi import lib\n"
        "print(fo.library_path(), lib.fo_cuda_built())\n"
        "print(fo.relu(torch.tensor([-1.0, 2.0])).tolist())"
    )
    result = subprocess_with_library(code, path)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first == f"{path} 0"
    assert second == "[0.0, 2.0]"


@requires_gpu()
def test_cuda_tensor_with_a_cpu_only_library_is_a_clear_error():
    path = cpu_only_library()
    code = "import torch, fused_ops_py as fo\nfo.relu(torch.ones(4, device='cuda'))"
    result = subprocess_with_library(code, path)
    assert result.returncode != 0
    assert "RuntimeError" in result.stderr and "built without CUDA" in result.stderr
