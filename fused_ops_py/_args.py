"""How tensors become arguments of the C library: dtype codes, device and
stream, the rows x cols view with a row stride, and the argument checks that
run before any call. Every op's Python layer goes through here."""

import functools
import math

import torch

from ._ffi import check, ffi, lib

DTYPE_CODES = {
    torch.float32: lib.FO_DTYPE_F32,
    torch.float16: lib.FO_DTYPE_F16,
    torch.bfloat16: lib.FO_DTYPE_BF16,
    torch.float64: lib.FO_DTYPE_F64,
}
HALF_DTYPES = (torch.float16, torch.bfloat16)

# 0.1 us a call, against 2.8 us for torch.cuda.current_stream(); older
# torches lack it.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


_CPU_ARGS = (lib.FO_DEVICE_CPU, 0, 0)
# The CPU kernels take as many threads as torch's own CPU ops:
# torch.get_num_threads(), told to the library when it changes (0.1 us a
# call to ask). A library older than fo_set_cpu_threads keeps its default.
_set_cpu_threads = getattr(lib, "fo_set_cpu_threads", None)
_cpu_threads_told = [0]


def device_args(tensor):
    """(device_type, device_index, stream) for a call on tensor's device: the
    current stream of that device, not of the current device. (is_cuda and
    get_device() cost a fifth of tensor.device, which builds an object.)"""
    if tensor.is_cuda:
        index = tensor.get_device()
        if _raw_stream is not None:
            return lib.FO_DEVICE_CUDA, index, _raw_stream(index)
        return lib.FO_DEVICE_CUDA, index, torch.cuda.current_stream(index).cuda_stream
    threads = torch.get_num_threads()
    if threads != _cpu_threads_told[0] and _set_cpu_threads is not None:
        _set_cpu_threads(threads)
        _cpu_threads_told[0] = threads
    return _CPU_ARGS


def row_count(tensor, cols):
    """Rows of tensor seen as rows x cols (the fake implementations under
    torch.compile count them the same way)."""
    return tensor.numel() // cols if cols else math.prod(tensor.shape[:-1])


def as_rows(tensor, cols=None):
    """View tensor as rows x cols (cols defaults to its last dimension; a
    normalization passes the product of its normalized dimensions) whose rows
    are each contiguous: (view, rows, cols, row stride in elements). A view is
    used whenever torch can make one (slices, transposed leading dims), and a
    contiguous copy otherwise (a transposed last dimension, an expanded one)."""
    if cols is None:
        shape = tensor.shape
        cols = shape[-1] if shape else 1
    if cols and tensor.is_contiguous():  # the common case: no view needed (1 us)
        return tensor, tensor.numel() // cols, cols, cols
    rows = row_count(tensor, cols)
    if tensor.numel() == 0:
        return tensor, rows, cols, cols
    view = tensor.reshape(rows, cols)
    if cols > 1 and view.stride(1) != 1:
        view = view.contiguous()
    return view, rows, cols, view.stride(0)


def dense_like(tensor, dtype=None):
    """A new dense tensor of tensor's shape and device (and dtype unless
    given): outputs are always dense. empty_like is 1.5 us cheaper a call
    than torch.empty(shape, dtype=, device=), and 0.3 us cheaper again
    without keywords, which a contiguous tensor of the same dtype does not
    need."""
    if tensor.is_contiguous() and (dtype is None or dtype is tensor.dtype):
        return torch.empty_like(tensor)
    return torch.empty_like(tensor, dtype=dtype, memory_format=torch.contiguous_format)


def check_tensor(fn, name, value):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in DTYPE_CODES:
        raise TypeError(
            f"{fn}: {name} has dtype {value.dtype}; supported dtypes are "
            "float32, float16, bfloat16 and float64"
        )
    if not (value.is_cpu or value.is_cuda):  # tensor.device costs 0.4 us
        raise ValueError(f"{fn}: {name} is on device {value.device}; only cpu and cuda are supported")


def check_same_device(fn, name, value, x, x_name="x"):
    # get_device() is -1 on the CPU and the index on CUDA (the only devices
    # check_tensor lets through): 0.1 us against 0.8 for comparing .device
    if value.get_device() != x.get_device():
        raise ValueError(
            f"{fn}: {name} is on {value.device} but {x_name} is on {x.device}; move them to one device"
        )


def param_dtype_ok(dtype, x_dtype):
    """A parameter (or a residual) has x's dtype, or float32 beside
    float16/bfloat16 x."""
    return dtype is x_dtype or (dtype is torch.float32 and x_dtype in HALF_DTYPES)


def check_param_dtype(fn, name, value, x):
    if not param_dtype_ok(value.dtype, x.dtype):
        raise TypeError(
            f"{fn}: {name} has dtype {value.dtype} but x has dtype {x.dtype}; "
            f"{name} must have x's dtype, or float32 when x is float16/bfloat16"
        )


def check_same_shape(fn, name, value, x):
    if value.shape != x.shape:
        raise ValueError(f"{fn}: {name} has shape {tuple(value.shape)} but x has shape {tuple(x.shape)}; they must match")


def check_finite_number(fn, name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{fn}: {name} must be a float, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{fn}: {name}={value} must be finite")


def workspace(query, device_type, *sizes, like):
    """A scratch buffer of the size `query` asks for, from torch's allocator
    (the library never allocates); None when none is needed."""
    nbytes = workspace_bytes(query, device_type, *sizes)
    if nbytes == 0:
        return None
    return like.new_empty(nbytes, dtype=torch.uint8)


@functools.lru_cache(maxsize=1024)
def workspace_bytes(query, device_type, *sizes):
    """What `query` answers. The library computes it from these arguments
    alone, so it is remembered: 0.1 us a backward instead of 2."""
    nbytes = ffi.new("int64_t *")
    check(query(device_type, *sizes, nbytes))
    return nbytes[0]
