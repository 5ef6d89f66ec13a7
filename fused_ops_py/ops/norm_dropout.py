"""The dropout stream of the norms (fo_norm_* with dropout_p > 0): a Philox
seed and offset from torch's generator of the tensor's device, so
torch.manual_seed reproduces a mask, and CUDA graph capture refused."""

import torch

from .._ffi import lib


def refuse_dropout_in_capture(x):
    """A seed captured in a CUDA graph would replay one mask forever."""
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            "fused-ops-py: dropout_p > 0 cannot run inside CUDA graph capture: every "
            "replay would reuse one dropout mask. Capture with dropout_p=0, or run "
            "the dropout step outside the graph"
        )


def dropout_seed_offset(x, rows, cols):
    """(seed, offset) for the Philox stream of a dropout over rows x cols,
    from torch's default generator of x's device: torch.manual_seed
    reproduces it, and consecutive calls differ. The library says how many
    counters the mask takes."""
    if x.is_cuda:
        refuse_dropout_in_capture(x)
        generator = torch.cuda.default_generators[x.get_device()]
        offset = generator.get_offset()
        counters = lib.fo_norm_dropout_counters(rows, cols)
        generator.set_offset(offset + (counters + 3) // 4 * 4)  # torch wants multiples of 4
        return generator.initial_seed(), offset
    return int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64)), 0


def seed_offset_values(seed_offset):
    """(seed, offset) as ints, from ints or from torch.compile's tensor."""
    if isinstance(seed_offset, torch.Tensor):
        return seed_offset.tolist()
    return seed_offset


def norm_seed_offset(dropout_p):
    """The dropout stream of a compiled call: drawn from torch's CPU
    generator as a tensor, so tracing keeps it a graph input; None without
    dropout (a CPU tensor in the graph would keep CUDA graphs away)."""
    if dropout_p > 0:
        return torch.randint(0, 2**62, (2,), dtype=torch.int64)
    return None
