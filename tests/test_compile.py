"""torch.compile (fullgraph, no graph breaks), torch.library.opcheck, CUDA
graphs and autocast."""

import pytest
import torch
import torch.nn.functional as F
from conftest import random, requires_gpu

import fused_ops_py as fo
from fused_ops_py import _core
from fused_ops_py.ops import norm as norm_op

pytestmark = pytest.mark.skipif(not _core.AVAILABLE, reason="torch.compile support needs torch >= 2.4")


def leaves(device, dtype, *shapes, seed=0):
    return [random(s, dtype, device, seed=seed + i).requires_grad_() for i, s in enumerate(shapes)]


def rope_of(x, r, interleaved=False):
    """fused_rope of x and r as [1, tokens, 1, head_dim] (unsqueeze_dim=2),
    32 dimensions rotated by tables made from them (no gradient), both
    outputs flattened into one tensor."""
    cos, sin = x.detach()[:, :32].cos(), r.detach()[:, :32].sin()
    q_embed, k_embed = fo.fused_rope(
        x[None, :, None], r[None, :, None], cos, sin, unsqueeze_dim=2, interleaved=interleaved
    )
    return torch.cat([q_embed.flatten(), k_embed.flatten()])


# Every public function and module, as f(x, residual, weight, bias) -> tensor.
FUNCTIONS = {
    "fused_bias_scale_relu": lambda x, r, w, b: fo.fused_bias_scale_relu(x, b, 0.5),
    "relu": lambda x, r, w, b: fo.relu(x),
    "square": lambda x, r, w, b: fo.square(x),
    "reduce_sum": lambda x, r, w, b: fo.reduce_sum(x),
    "fused_layer_norm": lambda x, r, w, b: fo.fused_layer_norm(x, w, b),
    "fused_rms_norm": lambda x, r, w, b: fo.fused_rms_norm(x, w),
    "fused_add_layer_norm": lambda x, r, w, b: torch.cat(fo.fused_add_layer_norm(x, r, w, b)),
    "fused_add_rms_norm": lambda x, r, w, b: torch.cat(fo.fused_add_rms_norm(x, r, w)),
    "fused_swiglu": lambda x, r, w, b: fo.fused_swiglu(x, r),
    "fused_geglu": lambda x, r, w, b: fo.fused_geglu(x, r),
    "fused_geglu_none": lambda x, r, w, b: fo.fused_geglu(x, r, approximate="none"),
    "fused_dyt": lambda x, r, w, b: fo.fused_dyt(x, w[:1] * 0.5, w, b),
    "fused_rope": lambda x, r, w, b: rope_of(x, r),
    "fused_rope_interleaved": lambda x, r, w, b: rope_of(x, r, interleaved=True),
}


def run_and_grad(function, inputs):
    out = function(*inputs)
    grads = torch.autograd.grad(out.float().square().sum(), inputs, allow_unused=True)
    return out, grads


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_fullgraph_compile_matches_eager(name, device):
    torch._dynamo.reset()
    inputs = leaves(device, torch.float32, (6, 40), (6, 40), (40,), (40,))
    function = FUNCTIONS[name]
    compiled = torch.compile(function, fullgraph=True)
    expected, expected_grads = run_and_grad(function, inputs)
    actual, actual_grads = run_and_grad(compiled, inputs)
    torch.testing.assert_close(actual, expected)
    for a, e in zip(actual_grads, expected_grads):
        if e is None:
            assert a is None
        else:
            torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-5)


def test_compiled_modules_without_graph_breaks(device):
    torch._dynamo.reset()
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 32),
        fo.FusedLayerNorm(32),
        fo.FusedBiasScaleReLU(32, 0.5),
        torch.nn.Linear(32, 32),
        fo.FusedRMSNorm(32),
    ).to(device)
    x = random((4, 32), torch.float32, device, seed=3)
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    compiled = torch.compile(model, fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x))


def test_compiled_dropout_is_reproducible_and_fresh(device):
    torch._dynamo.reset()
    x, residual = (random((16, 64), torch.float32, device, seed=s) for s in (4, 5))
    compiled = torch.compile(lambda a, r: fo.fused_add_layer_norm(a, r, dropout_p=0.5)[1], fullgraph=True)
    torch.manual_seed(0)
    first = compiled(x, residual)
    torch.manual_seed(0)
    again = compiled(x, residual)
    fresh = compiled(x, residual)
    assert torch.equal(first, again) and not torch.equal(first, fresh)
    kept = first != residual
    torch.testing.assert_close(first[kept], (x * 2 + residual)[kept])


def opcheck_samples(device):
    x, residual, weight, bias = leaves(device, torch.float32, (5, 24), (5, 24), (24,), (24,), seed=10)
    seed = torch.tensor([3, 8], dtype=torch.int64)
    # q and k as attention makes them: [B, T, H, D] projections seen as [B, H, T, D]
    q, k = (t.transpose(1, 2) for t in leaves(device, torch.float32, (2, 5, 3, 24), (2, 5, 1, 24), seed=14))
    cos, sin = random((2, 5, 16), torch.float32, device, seed=16), random((2, 5, 16), torch.float32, device, seed=17)
    none = None
    ops = torch.ops.fused_ops_py
    return [
        (ops.bias_scale_relu, (x, bias, 0.5, True)),
        (ops.bias_scale_relu, (x, None, 1.0, True)),
        (ops.bias_scale_relu, (x.detach(), None, 1.0, False)),  # inference: no mask
        (ops.square, (x,)),
        (ops.swiglu, (x, residual)),
        (ops.geglu, (x, residual, "tanh")),
        (ops.geglu, (x, residual, "none")),
        (ops.dyt, (x, weight[:1].detach().clone().requires_grad_(), weight, bias)),
        (ops.dyt, (x, weight[:1].detach().clone().requires_grad_(), weight, None)),
        (ops.rope, (q, k, cos, sin, 1, False)),
        (ops.rope, (q, k, cos, sin, 1, True)),
        (ops.rope, (q.transpose(1, 2), k.transpose(1, 2), cos[0], sin[0], 2, False)),
        (ops.reduce_sum, (x,)),
        (ops.quantize_fp8, (x.detach(), "rowwise", torch.float8_e4m3fn, False)),  # no gradient
        (ops.quantize_fp8, (x.detach(), "tensorwise", torch.float8_e5m2, True)),
        (ops.quantize_fp8, (x.detach()[:, :0], "tensorwise", torch.float8_e4m3fn, True)),  # no columns
        (ops.norm, (x, None, weight, bias, norm_op.LAYER, 1e-5, 0.0, [24], none)),
        (ops.norm, (x, residual, weight, None, norm_op.RMS, 1e-6, 0.0, [24], none)),
        (ops.norm, (x, residual, weight, bias, norm_op.LAYER, 1e-5, 0.25, [24], seed)),
    ]


@pytest.mark.parametrize("with_grad", [True, False])
def test_opcheck(with_grad, device):
    for op, args in opcheck_samples(device):
        if not with_grad:
            args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
        torch.library.opcheck(op, args)


# CUDA graphs --------------------------------------------------------------


@requires_gpu()
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_graph_capture_and_replay(dtype):
    x, residual, weight, bias = leaves("cuda", dtype, (64, 256), (64, 256), (256,), (256,), seed=20)
    dy = random((64, 256), dtype, "cuda", seed=30)

    def step():
        y = fo.fused_bias_scale_relu(x, bias, 0.5)
        normed, h = fo.fused_add_layer_norm(y, residual, weight, bias)
        out = fo.fused_rms_norm(normed, weight) + fo.square(h)
        return torch.autograd.grad(out, [x, residual, weight, bias], dy)

    expected = step()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up on a side stream, as torch's docs ask
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    with torch.no_grad():  # new inputs, then replay
        x.copy_(random((64, 256), dtype, "cuda", seed=40))
    expected = step()
    graph.replay()
    torch.cuda.synchronize()
    for a, e in zip(captured, expected):
        torch.testing.assert_close(a, e)


@requires_gpu()
def test_dropout_refuses_cuda_graph_capture():
    x, residual = (random((8, 32), torch.float32, "cuda", seed=s) for s in (1, 2))
    fo.fused_add_rms_norm(x, residual, dropout_p=0.1)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="dropout_p > 0 cannot run inside CUDA graph capture"):
        with torch.cuda.graph(graph):
            fo.fused_add_rms_norm(x, residual, dropout_p=0.1)
    # capture without dropout works afterwards
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, _ = fo.fused_add_rms_norm(x, residual, dropout_p=0.0)
    graph.replay()
    torch.testing.assert_close(out, fo.fused_add_rms_norm(x, residual)[0])


@requires_gpu()
def test_compile_reduce_overhead_mode():
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), fo.FusedLayerNorm(64), fo.FusedBiasScaleReLU(64)).cuda()
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    for step in range(4):
        # a training step as torch documents it for CUDA graphs: gradients
        # from the last replay are dropped, not accumulated into (they live
        # in memory the next replay reuses)
        model.zero_grad(set_to_none=True)
        torch.compiler.cudagraph_mark_step_begin()
        x = random((32, 64), torch.float32, "cuda", seed=step).requires_grad_()
        out = compiled(x)
        out.sum().backward()
        torch.testing.assert_close(out, model(x))


# autocast ------------------------------------------------------------------


@pytest.mark.parametrize("cast", [torch.bfloat16, torch.float16], ids=str)
def test_autocast_keeps_the_input_dtype(cast, device):
    # Documented difference: torch's LayerNorm runs in fp32 under autocast and
    # returns fp32; the fused modules compute in fp32 inside the kernel and
    # return x's dtype, so the bytes written stay half-size.
    if device.type == "cpu" and cast == torch.float16:
        pytest.skip("fp16 autocast on the CPU is not a common configuration")
    linear = torch.nn.Linear(48, 48).to(device)
    ours, theirs = fo.FusedLayerNorm(48).to(device), torch.nn.LayerNorm(48).to(device)
    x = random((10, 48), torch.float32, device, seed=50)
    with torch.autocast(device.type, dtype=cast):
        hidden = linear(x)
        y_ours, y_theirs = ours(hidden), theirs(hidden)
        r_ours = fo.FusedRMSNorm(48).to(device)(hidden)
    assert hidden.dtype == cast and y_ours.dtype == cast
    torch.testing.assert_close(y_ours.float(), y_theirs.float(), atol=2e-2, rtol=2e-2)
    expected_rms = F.rms_norm(hidden.float(), (48,), eps=torch.finfo(cast).eps) if hasattr(F, "rms_norm") else None
    assert r_ours.dtype == cast
    if expected_rms is not None:
        torch.testing.assert_close(r_ours.float(), expected_rms, atol=2e-2, rtol=2e-2)


def test_compile_on_0d_and_empty_tensors(device):
    torch._dynamo.reset()
    for x in (torch.tensor(-1.5, device=device), torch.randn(3, 0, device=device)):
        compiled = torch.compile(lambda t: fo.relu(t) + fo.square(t), fullgraph=True)
        torch.testing.assert_close(compiled(x), torch.relu(x) + x * x)
    x = torch.tensor(2.0, device=device, requires_grad=True)
    torch.library.opcheck(torch.ops.fused_ops_py.bias_scale_relu, (x, None, 1.0, True))
    empty = torch.randn(3, 0, device=device, requires_grad=True)
    torch.library.opcheck(torch.ops.fused_ops_py.bias_scale_relu, (empty, None, 1.0, True))
