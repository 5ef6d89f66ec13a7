"""fused_rope against Hugging Face's apply_rotary_pos_emb (rotate_half
layout, partial rotary as Phi's; interleaved pairs as Cohere's) in float64: values and gradients of q and
k, q and k read in place from strided views, cos and sin of every form."""

import pytest
import torch
from conftest import assert_close, random, requires_gpu

import fused_ops_py as fo
from fused_ops_py._ffi import check as check_status
from fused_ops_py.ops import rope


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rotate_interleaved(x):
    """Cohere's rotate_half: pairs (2i, 2i + 1)."""
    return torch.stack([-x[..., 1::2], x[..., ::2]], dim=-1).flatten(-2)


def reference(q, k, cos, sin, unsqueeze_dim=1, interleaved=False):
    """Hugging Face's apply_rotary_pos_emb with partial rotary (the first
    cos.shape[-1] dimensions rotated, the rest passed through); a [T, Dr]
    table is shared by the batch."""
    rotate = rotate_interleaved if interleaved else rotate_half
    if cos.dim() == 2:
        cos, sin = cos[None], sin[None]
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    rotary = cos.shape[-1]
    out = []
    for x in (q, k):
        x_rot, x_pass = x[..., :rotary], x[..., rotary:]
        out.append(torch.cat([x_rot * cos + rotate(x_rot) * sin, x_pass], dim=-1))
    return tuple(out)


def tables(batch, tokens, rotary, dtype, device, base=10000.0, form="batch"):
    """cos and sin as Hugging Face's rotary embedding makes them (emb =
    cat(freqs, freqs)), per sequence at shifted positions; form "batch"
    [B, T, Dr], "one" [1, T, Dr], "shared" [T, Dr]."""
    inv_freq = 1.0 / base ** (torch.arange(0, rotary, 2, dtype=torch.float64) / max(rotary, 1))
    positions = torch.arange(tokens, dtype=torch.float64)[None] + 3 * torch.arange(batch)[:, None]
    freqs = positions[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    if form == "one":
        cos, sin = cos[:1], sin[:1]
    elif form == "shared":
        cos, sin = cos[0], sin[0]
    return cos.to(dtype).to(device), sin.to(dtype).to(device)


def projected(batch, tokens, heads, head_dim, dtype, device, seed, unsqueeze_dim):
    """q as attention makes it: proj(x).view(B, T, H, D), transposed to [B,
    H, T, D] for unsqueeze_dim=1 (a strided view, not contiguous)."""
    flat = random((batch, tokens, heads * head_dim), dtype, device, seed=seed)
    x = flat.view(batch, tokens, heads, head_dim)
    return (x.transpose(1, 2) if unsqueeze_dim == 1 else x).requires_grad_()


# (batch, q_heads, k_heads, tokens, head_dim, rotary_dim): full rotary of
# common head sizes, partial (Phi-2: 32 of 80), 256, one token, odd
# half-sizes (no 16-byte path), head_dim not a multiple of 8, no rotation,
# empty batch and tokens
CASES = [
    (2, 4, 2, 5, 16, 16),
    (1, 3, 1, 7, 80, 80),
    (2, 2, 2, 3, 96, 96),
    (1, 4, 2, 6, 128, 128),
    (1, 2, 1, 4, 128, 64),
    (2, 3, 3, 5, 80, 32),
    (1, 2, 2, 3, 256, 256),
    (3, 5, 1, 1, 64, 64),
    (2, 2, 1, 6, 24, 24),
    (1, 2, 1, 3, 10, 6),
    (1, 1, 1, 1, 2, 2),
    (1, 2, 2, 5, 8, 0),
    (0, 2, 2, 3, 8, 8),
    (2, 2, 2, 0, 8, 8),
]


def expected_strides(x):
    """An output's layout: torch.empty_like's for x (x's own where x is
    dense, as a transposed projection, so that attention reads it as it
    is), or contiguous where that would not keep rows contiguous."""
    strides = torch.empty_like(x).stride()
    return strides if strides[-1] == 1 else x.new_empty(x.shape).stride()


def check(q, k, cos, sin, unsqueeze_dim, dtype, seed=20, interleaved=False):
    q_embed, k_embed = fo.fused_rope(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim, interleaved=interleaved)
    leaves = [t.detach().double().requires_grad_() for t in (q, k)]
    expected = reference(*leaves, cos.double(), sin.double(), unsqueeze_dim, interleaved)
    for got, want, x in zip((q_embed, k_embed), expected, (q, k)):
        assert got.shape == x.shape and got.dtype == dtype
        assert got.numel() == 0 or got.stride() == expected_strides(x), (got.stride(), x.stride())
        assert_close(got, want, dtype)
    cotangents = [random(x.shape, dtype, x.device, seed=seed + i) for i, x in enumerate((q, k))]
    grads = torch.autograd.grad((q_embed, k_embed), (q, k), cotangents)
    expected_grads = torch.autograd.grad(expected, leaves, [c.double() for c in cotangents])
    for got, want in zip(grads, expected_grads):
        assert_close(got, want, dtype)


@pytest.mark.parametrize("interleaved", [False, True], ids=["halves", "interleaved"])
@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward_and_gradients(case, unsqueeze_dim, interleaved, dtype, device):
    batch, q_heads, k_heads, tokens, head_dim, rotary = case
    q = projected(batch, tokens, q_heads, head_dim, dtype, device, 1, unsqueeze_dim)
    k = projected(batch, tokens, k_heads, head_dim, dtype, device, 2, unsqueeze_dim)
    cos, sin = tables(batch, tokens, rotary, dtype, device)
    check(q, k, cos, sin, unsqueeze_dim, dtype, interleaved=interleaved)


@pytest.mark.parametrize("form", ["batch", "one", "shared", "sliced", "expanded", "fp32"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_cos_and_sin_forms(form, dtype, device):
    batch, tokens, rotary = 2, 9, 64
    q = projected(batch, tokens, 4, 64, dtype, device, 3, 1)
    k = projected(batch, tokens, 2, 64, dtype, device, 4, 1)
    table_dtype = torch.float32 if form == "fp32" else dtype
    if form == "sliced":  # a longer cached table cut to the sequence: other strides
        cos, sin = (t[:, :tokens] for t in tables(batch, tokens + 7, rotary, dtype, device))
    elif form == "expanded":  # one table expanded over the batch: batch stride 0
        cos, sin = (t.expand(batch, tokens, rotary) for t in tables(1, tokens, rotary, dtype, device))
    else:
        cos, sin = tables(
            batch, tokens, rotary, table_dtype, device, form=form if form in ("one", "shared") else "batch"
        )
    check(q, k, cos, sin, 1, dtype)


@pytest.mark.parametrize("interleaved", [False, True], ids=["halves", "interleaved"])
def test_arbitrary_tables(interleaved, device):
    """cos and sin of unrelated values, halves differing: the general
    formula, not one that assumes emb = cat(freqs, freqs)."""
    q = projected(2, 5, 3, 24, torch.float64, device, 5, 2)
    k = projected(2, 5, 2, 24, torch.float64, device, 6, 2)
    cos, sin = random((2, 5, 16), torch.float64, device, seed=7), random((2, 5, 16), torch.float64, device, seed=8)
    check(q, k, cos, sin, 2, torch.float64, interleaved=interleaved)


@pytest.mark.parametrize("interleaved", [False, True], ids=["halves", "interleaved"])
def test_gradcheck_float64(interleaved, device):
    q = projected(2, 3, 2, 12, torch.float64, device, 9, 1)
    k = projected(2, 3, 1, 12, torch.float64, device, 10, 1)
    cos, sin = random((2, 3, 8), torch.float64, device, seed=11), random((2, 3, 8), torch.float64, device, seed=12)
    assert torch.autograd.gradcheck(lambda a, b: fo.fused_rope(a, b, cos, sin, interleaved=interleaved), (q, k))


class _Spy:
    """Stands in for the library in ops/rope.py, recording each fo_rope_* call's
    q and k addresses."""

    def __init__(self, lib):
        self.lib, self.seen = lib, []

    def __getattr__(self, name):
        function = getattr(self.lib, name)
        if not name.startswith("fo_rope_"):
            return function

        def call(a):
            self.seen.append((a.q, a.k))
            return function(a)

        return call


def test_q_and_k_are_read_in_place(device, monkeypatch):
    """The transposed views of a projection go to the library as they are:
    its strides, their addresses, no copy."""
    q = projected(2, 6, 4, 32, torch.bfloat16, device, 13, 1)
    k = projected(2, 6, 2, 32, torch.bfloat16, device, 14, 1)
    assert not q.is_contiguous() and not k.is_contiguous()
    cos, sin = tables(2, 6, 32, torch.float32, device)
    spy = _Spy(rope.lib)
    monkeypatch.setattr(rope, "lib", spy)
    with torch.no_grad():
        fo.fused_rope(q, k, cos, sin)
    assert spy.seen == [(q.data_ptr(), k.data_ptr())]


def test_outputs_and_gradients_keep_the_projection_layout(device):
    """q_embed of a transposed projection is laid out as q, so that the
    model's transpose back after attention copies nothing; the gradient of
    q takes the layout of the gradient that arrives."""
    q = projected(2, 6, 4, 32, torch.bfloat16, device, 13, 1)
    k = projected(2, 6, 2, 32, torch.bfloat16, device, 14, 1)
    cos, sin = tables(2, 6, 32, torch.float32, device)
    q_embed, k_embed = fo.fused_rope(q, k, cos, sin)
    assert q_embed.stride() == q.stride() and k_embed.stride() == k.stride()
    assert q_embed.transpose(1, 2).is_contiguous()
    dq_embed = random((2, 6, 4, 32), torch.bfloat16, device, seed=15).transpose(1, 2)
    dq, dk = torch.autograd.grad((q_embed, k_embed), (q, k), (dq_embed, torch.zeros_like(k_embed)))
    assert dq.stride() == dq_embed.stride()
    q64, k64 = (t.detach().double().requires_grad_() for t in (q, k))
    reference(q64, k64, cos.double(), sin.double())[0].backward(dq_embed.double())
    assert_close(dq, q64.grad, torch.bfloat16)


@pytest.mark.parametrize("strides", [(640, 32, 128, 1), (1280, 160, 32, 1), (0, 0, 0, 0)], ids=str)
def test_output_strides_given_to_the_library(strides, device):
    """The struct's output strides: any non-overlapping layout (all 0:
    dense), the values the same."""
    q = random((2, 4, 5, 32), torch.float32, device, seed=30)
    cos, sin = tables(2, 5, 32, torch.float32, device)
    out = torch.full((2 * 1280,), float("nan"), device=device)
    placed = out.as_strided(q.shape, strides) if any(strides) else out[: q.numel()].view(q.shape)
    a = rope.new_struct(
        rope._ROPE,
        rope.device_args(q)[:2],
        stream=rope.device_args(q)[2],
        q_out=placed.data_ptr(),
        q=q.data_ptr(),
        q_strides=q.stride(),
        cos=cos.data_ptr(),
        sin=sin.data_ptr(),
        cos_strides=cos.stride(),
        sin_strides=sin.stride(),
        batch=2,
        tokens=5,
        q_heads=4,
        k_heads=0,
        head_dim=32,
        rotary_dim=32,
        layout=0,
        dtype=rope.DTYPE_CODES[torch.float32],
        cos_dtype=rope.DTYPE_CODES[torch.float32],
        q_out_strides=strides,
    )
    assert rope.lib.fo_rope_forward(a) == 0
    assert_close(placed, reference(q.double(), q.double(), cos.double(), sin.double())[0], torch.float32)


@pytest.mark.parametrize(
    "strides, words",
    [
        ((640, 32, 160, 1), ["q_out strides 640, 32, 160, 1", "over each other"]),
        ((640, 160, 32, 2), ["q_out stride 2", "must be 1"]),
        ((640, 160, -32, 1), ["q_out stride -32", "negative"]),
    ],
    ids=str,
)
def test_overlapping_output_strides_are_refused(strides, words, device):
    q = random((2, 4, 5, 32), torch.float32, device, seed=31)
    cos, sin = tables(2, 5, 32, torch.float32, device)
    out = torch.empty(2 * 640 * 2, device=device)
    a = rope.new_struct(
        rope._ROPE,
        rope.device_args(q)[:2],
        q_out=out.data_ptr(),
        q=q.data_ptr(),
        q_strides=q.stride(),
        cos=cos.data_ptr(),
        sin=sin.data_ptr(),
        cos_strides=cos.stride(),
        sin_strides=sin.stride(),
        batch=2,
        tokens=5,
        q_heads=4,
        k_heads=0,
        head_dim=32,
        rotary_dim=32,
        layout=0,
        dtype=rope.DTYPE_CODES[torch.float32],
        cos_dtype=rope.DTYPE_CODES[torch.float32],
        q_out_strides=strides,
    )
    with pytest.raises(ValueError) as info:
        check_status(rope.lib.fo_rope_forward(a))
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_misaligned_views(device):
    """Views one element past an aligned start: element-wise accesses."""
    flat = random((2, 5, 3 * 64 + 1), torch.bfloat16, device, seed=22)
    q = flat[..., 1:].view(2, 5, 3, 64).transpose(1, 2).requires_grad_()
    k = random((2, 5, 64 + 1), torch.bfloat16, device, seed=23)[..., 1:].view(2, 5, 1, 64)
    k = k.transpose(1, 2).requires_grad_()
    cos, sin = tables(2, 5, 64, torch.bfloat16, device)
    check(q, k, cos, sin, 1, torch.bfloat16)


def test_last_dimension_not_contiguous(device):
    """A head_dim stride other than 1 is copied first; the values are the same."""
    q = random((1, 3, 8, 5), torch.float32, device, seed=15).transpose(-1, -2).requires_grad_()  # [1, 3, 5, 8]
    k = random((1, 2, 5, 8), torch.float32, device, seed=16).requires_grad_()
    cos, sin = tables(1, 5, 8, torch.float32, device)
    check(q, k, cos, sin, 1, torch.float32)


def test_one_output_used_and_stride0_gradients(device):
    q = projected(2, 4, 3, 16, torch.float32, device, 17, 1)
    k = projected(2, 4, 1, 16, torch.float32, device, 18, 1)
    cos, sin = tables(2, 4, 16, torch.float32, device)
    q_embed, k_embed = fo.fused_rope(q, k, cos, sin)
    q_embed.sum().backward()  # a stride-0 gradient for q, none for k
    q64, k64 = (t.detach().double().requires_grad_() for t in (q, k))
    reference(q64, k64, cos.double(), sin.double())[0].sum().backward()
    assert_close(q.grad, q64.grad, torch.float32)
    assert torch.equal(k.grad, torch.zeros_like(k))


def test_gradient_only_where_wanted(device):
    q = projected(1, 3, 2, 8, torch.float32, device, 19, 1)
    k = random((1, 1, 3, 8), torch.float32, device, seed=20)
    cos, sin = tables(1, 3, 8, torch.float32, device)
    q_embed, k_embed = fo.fused_rope(q, k, cos, sin)
    assert k_embed.requires_grad  # one Function gives both outputs
    (q_embed.sum() + k_embed.sum()).backward()
    assert k.grad is None and q.grad is not None


def test_no_grad_saves_nothing(device):
    q = projected(1, 3, 2, 8, torch.float32, device, 21, 1)
    cos, sin = tables(1, 3, 8, torch.float32, device)
    with torch.no_grad():
        q_embed, k_embed = fo.fused_rope(q, q, cos, sin)
    assert q_embed.grad_fn is None and k_embed.grad_fn is None


def _bad(d):
    q, k = torch.randn(2, 4, 5, 16, device=d), torch.randn(2, 2, 5, 16, device=d)
    cos, sin = torch.randn(2, 5, 16, device=d), torch.randn(2, 5, 16, device=d)
    return [
        (lambda: fo.fused_rope(q, k.double(), cos, sin), TypeError, ["fused_rope", "k", "torch.float64"]),
        (
            lambda: fo.fused_rope(q.bfloat16(), k.bfloat16(), cos.half(), sin.half()),
            TypeError,
            ["cos", "torch.float16", "float32"],
        ),
        (lambda: fo.fused_rope(q, k, cos, sin.double()), TypeError, ["sin", "torch.float64"]),
        (
            lambda: fo.fused_rope(q.double(), k.double(), cos, sin),
            TypeError,
            ["cos has dtype torch.float32", "q has dtype torch.float64"],
        ),
        (lambda: fo.fused_rope(q.int(), k, cos, sin), TypeError, ["q", "int32"]),
        (lambda: fo.fused_rope(q, [1.0], cos, sin), TypeError, ["k", "list"]),
        (lambda: fo.fused_rope(q[0], k[0], cos, sin), ValueError, ["4-d", "(4, 5, 16)"]),
        (lambda: fo.fused_rope(q, k[:, :, :4], cos, sin), ValueError, ["k has shape (2, 2, 4, 16)"]),
        (
            lambda: fo.fused_rope(q, k, cos[:, :4], sin[:, :4]),
            ValueError,
            ["cos has shape (2, 4, 16)", "(2, 5, rotary_dim)"],
        ),
        (lambda: fo.fused_rope(q, k, cos, sin[..., :8]), ValueError, ["sin has shape", "cos has shape"]),
        (lambda: fo.fused_rope(q, q, cos, sin, unsqueeze_dim=2), ValueError, ["cos has shape", "unsqueeze_dim=2"]),
        (lambda: fo.fused_rope(q, k, cos, sin, unsqueeze_dim=3), ValueError, ["unsqueeze_dim=3", "must be 1"]),
        (lambda: fo.fused_rope(q, k, cos, sin, unsqueeze_dim="1"), TypeError, ["unsqueeze_dim", "str"]),
        (
            lambda: fo.fused_rope(q, k, cos[..., :7], sin[..., :7]),
            ValueError,
            ["fo_rope_forward", "rotary_dim=7", "even"],
        ),
        (
            lambda: fo.fused_rope(q, k, torch.randn(2, 5, 18, device=d), torch.randn(2, 5, 18, device=d)),
            ValueError,
            ["rotary_dim=18", "head_dim=16"],
        ),
        (lambda: fo.fused_rope(q, k, cos.requires_grad_(), sin), ValueError, ["fused_rope", "requires grad", "detach"]),
    ]


@pytest.mark.parametrize("case", range(len(_bad("cpu"))))
def test_bad_input(case, device):
    call, exception, words = _bad(device)[case]
    with pytest.raises(exception) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@requires_gpu()
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_gpu_matches_cpu_kernels(dtype):
    q = projected(2, 7, 8, 128, dtype, "cpu", 24, 1)
    k = projected(2, 7, 2, 128, dtype, "cpu", 25, 1)
    cos, sin = tables(2, 7, 96, torch.float32 if dtype == torch.bfloat16 else dtype, "cpu")
    q_gpu, k_gpu = (t.detach().cuda().requires_grad_() for t in (q, k))  # strides kept
    assert q_gpu.stride() == q.stride()
    outputs = fo.fused_rope(q, k, cos, sin)
    outputs_gpu = fo.fused_rope(q_gpu, k_gpu, cos.cuda(), sin.cuda())
    for a, b in zip(outputs_gpu, outputs):
        assert_close(a, b.double(), dtype)
    grads = torch.autograd.grad(outputs, (q, k), outputs)
    grads_gpu = torch.autograd.grad(outputs_gpu, (q_gpu, k_gpu), outputs_gpu)
    for a, b in zip(grads_gpu, grads):
        assert_close(a, b.double(), dtype)


@requires_gpu()
def test_more_than_2_to_the_32_items():
    """2^32 + 16 rows of two elements (one thread item each): the kernel's
    64-bit index path. q, k and the tables are expanded views, read in place
    with stride 0; only the outputs take memory (24 GiB)."""
    tokens = (1 << 31) + 8
    free, _ = torch.cuda.mem_get_info()
    if free < 6 * tokens * 2 + (1 << 30):
        pytest.skip("not enough GPU memory")
    q = torch.tensor([0.5, -2.0], dtype=torch.bfloat16, device="cuda").expand(1, 2, tokens, 2)
    k = torch.tensor([1.5, 0.25], dtype=torch.bfloat16, device="cuda").expand(1, 1, tokens, 2)
    angle = torch.tensor(0.75, dtype=torch.float64)
    cos = angle.cos().to(torch.bfloat16).cuda().expand(tokens, 2)
    sin = angle.sin().to(torch.bfloat16).cuda().expand(tokens, 2)
    q_embed, k_embed = fo.fused_rope(q, k, cos, sin)
    for x, out in ((q, q_embed), (k, k_embed)):
        row = reference(x[:, :, :1].double(), x[:, :, :1].double(), cos[:1].double(), sin[:1].double())[0]
        expected = row.to(torch.bfloat16).cuda()
        assert bool((out == expected).all())
