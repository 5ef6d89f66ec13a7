"""python -m fused_ops_py selftest: every op once, forward and backward, on
every available device, against torch; one line of verdict per op."""

import torch
import torch.nn.functional as F

import fused_ops_py as fo


def _hf_rope(q, k, cos, sin, unsqueeze_dim=1):
    """Hugging Face's apply_rotary_pos_emb, partial rotary as Phi's."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    rotary, half = cos.shape[-1], cos.shape[-1] // 2
    out = []
    for x in (q, k):
        x_rot, x_pass = x[..., :rotary], x[..., rotary:]
        rotated = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
        out.append(torch.cat([x_rot * cos + rotated * sin, x_pass], dim=-1))
    return out


def _rope(rope, x, r):
    """rope of x and r as [1, heads, rows, 40], 16 of each head's 40
    dimensions rotated by tables of the rows' positions; one tensor out."""
    rows, cols = x.shape
    positions = torch.arange(rows, dtype=torch.float64, device=x.device)[:, None]
    angles = positions / 10000 ** (torch.arange(8, dtype=torch.float64, device=x.device) / 8)
    emb = torch.cat((angles, angles), dim=-1)[None].to(x.dtype)
    q, k = (t.view(1, rows, cols // 40, 40).transpose(1, 2) for t in (x, r))
    return torch.cat([t.flatten() for t in rope(q, k, emb.cos(), emb.sin())])


def _cases():
    """(name, fused function, torch function, input shapes); the functions
    take (x, residual, weight, bias) and return one tensor."""
    rms = getattr(F, "rms_norm", None) or (
        lambda h, shape, w, eps: h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w
    )
    eps = torch.finfo(torch.float32).eps
    return [
        (
            "fused_bias_scale_relu",
            lambda x, r, w, b: fo.fused_bias_scale_relu(x, b, 0.5),
            lambda x, r, w, b: torch.relu(x * 0.5 + b),
        ),
        ("relu", lambda x, r, w, b: fo.relu(x), lambda x, r, w, b: torch.relu(x)),
        ("square", lambda x, r, w, b: fo.square(x), lambda x, r, w, b: x * x),
        ("fused_swiglu", lambda x, r, w, b: fo.fused_swiglu(x, r), lambda x, r, w, b: F.silu(x) * r),
        ("fused_geglu", lambda x, r, w, b: fo.fused_geglu(x, r), lambda x, r, w, b: F.gelu(x, approximate="tanh") * r),
        (
            "fused_dyt",
            lambda x, r, w, b: fo.fused_dyt(x, w[:1] * 0.5, w, b),
            lambda x, r, w, b: w * torch.tanh(w[:1] * 0.5 * x) + b,
        ),
        ("fused_rope", lambda x, r, w, b: _rope(fo.fused_rope, x, r), lambda x, r, w, b: _rope(_hf_rope, x, r)),
        ("reduce_sum", lambda x, r, w, b: fo.reduce_sum(x), lambda x, r, w, b: x.sum()),
        (
            "fused_layer_norm",
            lambda x, r, w, b: fo.fused_layer_norm(x, w, b),
            lambda x, r, w, b: F.layer_norm(x, x.shape[-1:], w, b),
        ),
        ("fused_rms_norm", lambda x, r, w, b: fo.fused_rms_norm(x, w), lambda x, r, w, b: rms(x, x.shape[-1:], w, eps)),
        (
            "fused_add_layer_norm",
            lambda x, r, w, b: torch.cat(fo.fused_add_layer_norm(x, r, w, b)),
            lambda x, r, w, b: torch.cat([F.layer_norm(x + r, x.shape[-1:], w, b), x + r]),
        ),
        (
            "fused_add_rms_norm",
            lambda x, r, w, b: torch.cat(fo.fused_add_rms_norm(x, r, w)),
            lambda x, r, w, b: torch.cat([rms(x + r, x.shape[-1:], w, eps), x + r]),
        ),
    ]


def _check(fused, reference, device):
    generator = torch.Generator().manual_seed(0)
    shapes = [(37, 520), (37, 520), (520,), (520,)]
    base = [torch.randn(s, generator=generator, dtype=torch.float64) for s in shapes]
    ours = [t.float().to(device).requires_grad_() for t in base]
    theirs = [t.clone().requires_grad_() for t in base]
    out, expected = fused(*ours), reference(*theirs)
    grads = torch.autograd.grad(out.square().sum(), ours, allow_unused=True)
    expected_grads = torch.autograd.grad(expected.square().sum(), theirs, allow_unused=True)
    worst = ((out.double().cpu() - expected).abs().max() / expected.abs().max().clamp_min(1e-12)).item()
    for g, e in zip(grads, expected_grads):
        if (g is None) != (e is None):
            return False, "a gradient is missing"
        if g is not None:
            scale = e.abs().max().clamp_min(1e-12)
            worst = max(worst, ((g.double().cpu() - e).abs().max() / scale).item())
    return worst < 1e-4, f"largest relative difference {worst:.1e}"


def main():
    devices = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    failures = 0
    for device in devices:
        for name, fused, reference in _cases():
            try:
                ok, detail = _check(fused, reference, torch.device(device))
            except Exception as error:  # a verdict for every op, whatever breaks
                ok, detail = False, f"{type(error).__name__}: {error}"
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {device:<7} {name:<22} {detail}")
    print(f"{'all ops agree with torch' if not failures else f'{failures} FAILED'} on {', '.join(devices)}")
    return 1 if failures else 0
