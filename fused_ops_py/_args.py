"""How tensors become arguments of the C library: dtype codes, device and
stream, the rows x cols view with a row stride, and the checks of what only
Python can see (a value's Python type, a tensor's dtype, device and shape).
The values themselves (eps, dropout_p, scale, sizes, strides) are checked by
the library, which names the argument in its message."""

import math

import torch

from ._ffi import lib

Tensor = torch.Tensor

DTYPE_CODES = {
    torch.float32: lib.FO_DTYPE_F32,
    torch.float16: lib.FO_DTYPE_F16,
    torch.bfloat16: lib.FO_DTYPE_BF16,
    torch.float64: lib.FO_DTYPE_F64,
}
HALF_DTYPES = (torch.float16, torch.bfloat16)


def _current_stream(index):
    return torch.cuda.current_stream(index).cuda_stream


# cuda_stream(index): the current stream of CUDA device `index` (not of the
# current device), as an address. torch's raw getter costs 0.1 us a call,
# against 2.8 us for torch.cuda.current_stream(); older torches lack it.
cuda_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _current_stream


# The CPU kernels take as many threads as torch's own CPU ops:
# torch.get_num_threads(), told to the library when it changes.
_cpu_threads_told = [0]


def sync_cpu_threads():
    threads = torch.get_num_threads()
    if threads != _cpu_threads_told[0]:
        lib.fo_set_cpu_threads(threads)
        _cpu_threads_told[0] = threads


_CPU_ARGS = (lib.FO_DEVICE_CPU, 0, 0)


def device_args(tensor):
    """(device_type, device_index, stream) for a call on tensor's device."""
    if tensor.is_cuda:
        index = tensor.get_device()
        return lib.FO_DEVICE_CUDA, index, cuda_stream(index)
    sync_cpu_threads()
    return _CPU_ARGS


def as_rows(tensor, cols=None):
    """View tensor as rows x cols (cols defaults to its last dimension; a
    normalization passes the product of its normalized dimensions) whose rows
    are each contiguous: (view, rows, cols, row stride in elements). A view is
    used whenever torch can make one (slices, transposed leading dims), and a
    contiguous copy otherwise (a transposed last dimension, an expanded one)."""
    if cols is None:
        shape = tensor.shape
        cols = shape[-1] if shape else 1
    if cols and tensor.is_contiguous():
        return tensor, tensor.numel() // cols, cols, cols
    rows = tensor.numel() // cols if cols else math.prod(tensor.shape[:-1])
    if tensor.numel() == 0:
        return tensor, rows, cols, cols
    view = tensor.reshape(rows, cols)
    if cols > 1 and view.stride(1) != 1:
        view = view.contiguous()
    return view, rows, cols, view.stride(0)


def dense_like(tensor, dtype=None):
    """A new dense tensor of tensor's shape and device (and dtype unless
    given): outputs are always dense. empty_like without keywords is the
    cheapest allocation torch has."""
    if tensor.is_contiguous() and (dtype is None or dtype is tensor.dtype):
        return torch.empty_like(tensor)
    return torch.empty_like(tensor, dtype=dtype, memory_format=torch.contiguous_format)


def check_tensor(fn, name, value):
    if not isinstance(value, Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in DTYPE_CODES:
        raise TypeError(
            f"{fn}: {name} has dtype {value.dtype}; supported dtypes are float32, float16, bfloat16 and float64"
        )
    if not (value.is_cpu or value.is_cuda):
        raise ValueError(f"{fn}: {name} is on device {value.device}; only cpu and cuda are supported")


def check_companion(fn, name, value, x, x_name="x"):
    """A tensor beside x: checked as a tensor, and on x's device."""
    check_tensor(fn, name, value)
    if value.get_device() != x.get_device():
        raise ValueError(f"{fn}: {name} is on {value.device} but {x_name} is on {x.device}; move them to one device")


def check_same_shape(fn, name, value, x, x_name="x"):
    if value.shape != x.shape:
        raise ValueError(
            f"{fn}: {name} has shape {tuple(value.shape)} but {x_name} has shape {tuple(x.shape)}; they must match"
        )


def check_number(fn, name, value):
    """A Python number for a C double; its range is the library's to check."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{fn}: {name} must be a float, got {type(value).__name__}")
    return float(value)
