"""What every op shares, and no op by name: the plan cache (a signature's
checks and argument struct, made once), filling a struct for a call (its
addresses and stream), the free-struct pool, workspaces, the cheap eager
autograd apply, and the torch.compile switches. Each op's module
(fused_ops_py/ops/<op>.py) builds on these."""

import inspect

import torch

from . import _args
from ._ffi import ffi, finish

BYTES = ffi.typeof("int64_t *")

AVAILABLE = hasattr(torch.library, "custom_op") and hasattr(torch, "compiler")
custom_op = torch.library.custom_op if AVAILABLE else None

# True while dynamo traces, when the public functions call the ops.
# torch.compiler.is_compiling itself, not a function around it: one call
# less on every eager call, and dynamo knows the very object.
compiling = torch.compiler.is_compiling if AVAILABLE else (lambda: False)


def records_grad(x, other=None):
    """Whether autograd must record the call (inference skips its cost)."""
    return torch.is_grad_enabled() and (x.requires_grad or (other is not None and other.requires_grad))


def empty(like):
    """The placeholder a registered op returns for a gradient not wanted."""
    return like.new_empty(0)


def or_empty(tensor, like):
    return tensor if tensor is not None else empty(like)


# signatures seen, each with its prepared call; a bound keeps a process that
# sees endless shapes (dynamic batch sizes) from growing without end
MAX_SIGNATURES = 4096


def remember(cache, key, value):
    if len(cache) >= MAX_SIGNATURES:
        cache.clear()
    cache[key] = value
    return value


def prepared(plans, key, make, *args):
    """The prepared call of a signature: remembered under key (None: not to
    be remembered), else made by make(*args), which checks the arguments
    and raises on what is wrong."""
    try:
        plan = plans.get(key)
    except TypeError:  # unhashable (a list for a tuple): not remembered
        key = plan = None
    if plan is None:
        plan = make(*args)
        if key is not None:
            remember(plans, key, plan)
    return plan


def call_struct(ctype, template, cuda_index, free=None):
    """A struct for a call, filled as the prepared template: one of free
    (a plan's structs that no call holds, each filled as the template but
    for fields every call writes; the call gives it back) where given, else
    a new copy (0.9 us against 0.1). With the current stream of CUDA device
    cuda_index, or on the CPU (None) the thread count told to the library."""
    if free is None:
        a = ffi.new(ctype, template[0])
    else:
        try:
            a = free.pop()
        except IndexError:  # none free: calls on other threads hold them
            a = ffi.new(ctype, template[0])
    if cuda_index is None:
        _args.sync_cpu_threads()
    else:
        a.stream = _args.cuda_stream(cuda_index)
    return a


def cuda_index(x):
    """x's CUDA device index, None on the CPU: what a plan keeps for call_struct."""
    return x.get_device() if x.is_cuda else None


def new_struct(ctype, device, **fields):
    """A struct of `ctype` with its size, device and the given fields."""
    s = ffi.new(ctype)
    s.struct_size = ffi.sizeof(ctype.item)
    s.device_type, s.device_index = device[0], device[1]
    for name, value in fields.items():
        setattr(s, name, value)
    return s


def stats_dtype(dtype):
    """Statistics (the norms' mean and rstd, the losses' row sums) are fp32,
    fp64 for fp64."""
    return torch.float64 if dtype is torch.float64 else torch.float32


def address(tensor):
    return tensor.data_ptr() if tensor is not None else 0


def scratch(sizes, key, query, args, like):
    """The scratch buffer of this call, from torch's allocator (the library
    never allocates); None when it needs none. Its size is asked of the
    library once a signature (key: everything the answer turns on)."""
    try:
        nbytes = sizes.get(key)
    except TypeError:  # unhashable: not remembered
        key = nbytes = None
    if nbytes is None:
        answer = ffi.new(BYTES)
        status = query(args, answer)
        if status:
            finish(query, status, (args.device_type, args.device_index))
        nbytes = answer[0] if key is None else remember(sizes, key, answer[0])
    return like.new_empty(nbytes, dtype=torch.uint8) if nbytes else None


# torch before 2.12 wraps Function.apply in Python: it looks for functorch
# transforms and setup_context and maps over every argument, which costs more
# than the C apply it then calls. eager_apply(F) calls the C apply itself
# when no transform is active, unwrapping dead functorch wrappers as torch does.
_PYTHON_APPLY = inspect.isfunction(getattr(torch.autograd.Function.apply, "__func__", None))


def eager_apply(function):
    """function.apply, or a cheaper equivalent on torches that wrap it in Python."""
    if not _PYTHON_APPLY:
        return function.apply
    c_apply = super(torch.autograd.Function, function).apply
    transforms_active = torch._C._are_functorch_transforms_active
    unwrap_if_dead = torch._C._functorch.unwrap_if_dead
    tensor = torch.Tensor

    def apply(*args):
        if transforms_active():
            return function.apply(*args)
        return c_apply(*[unwrap_if_dead(a) if isinstance(a, tensor) else a for a in args])

    return apply
