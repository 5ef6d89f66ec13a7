"""What forward keeps for backward goes through save_for_backward, so
saved-tensor hooks (offloading, compression, checkpointing) see all of it:
with hooks that pack each saved tensor into a copy, every op gives the
gradients it gives without them, and no tensor reaches backward another way."""

import pytest
import torch
from conftest import random

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
    "fused_swiglu": lambda x, r, w, b: fo.fused_swiglu(x, r),
    "fused_geglu": lambda x, r, w, b: fo.fused_geglu(x, r),
    "fused_dyt": lambda x, r, w, b: fo.fused_dyt(x, w[:1] * 0.5, w, b),
    "fused_rope": lambda x, r, w, b: rope_of(x, r),
    "fused_layer_norm": lambda x, r, w, b: fo.fused_layer_norm(x, w, b),
    "fused_rms_norm": lambda x, r, w, b: fo.fused_rms_norm(x, w),
    "fused_add_layer_norm": lambda x, r, w, b: torch.cat(fo.fused_add_layer_norm(x, r, w, b, dropout_p=0.2)),
    "fused_add_rms_norm": lambda x, r, w, b: torch.cat(fo.fused_add_rms_norm(x, r, w)),
}


def gradients(name, tensors):
    torch.manual_seed(0)  # dropout: the same mask each time
    out = OPS[name](*tensors)
    dy = random(out.shape, out.dtype, out.device, seed=9)  # no torch op that saves tensors after ours
    return torch.autograd.grad(out, tensors, dy, allow_unused=True)


@pytest.mark.parametrize("name", list(OPS))
def test_saved_tensor_hooks_see_what_backward_uses(name, device):
    tensors = [
        random(s, torch.float32, device, seed=i).requires_grad_()
        for i, s in enumerate([(6, 40), (6, 40), (40,), (40,)])
    ]
    expected = gradients(name, tensors)
    packed = []

    def pack(tensor):
        packed.append(tensor)
        return tensor.clone()  # backward must read the copy: the hook owns it

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda copy: copy):
        actual = gradients(name, tensors)
    assert packed, "the op saved nothing through save_for_backward"
    for a, e in zip(actual, expected):
        if e is None:
            assert a is None
        else:
            torch.testing.assert_close(a, e)
