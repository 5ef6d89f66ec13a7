"""The raw calls: one function per op and direction that takes tensors,
allocates the outputs, makes the one foreign call and raises on a bad
status. No autograd here.

What depends only on a call's signature (shapes, strides, dtypes, device,
the scalar arguments) is worked out once and kept: the rows x cols view and
an argument struct filled with everything but the addresses and the stream.
A call then copies that struct, writes its addresses and calls."""

import functools
import math
import re

import torch

from . import _args
from ._args import DTYPE_CODES, as_rows, dense_like, device_args
from ._ffi import SYNC, ffi, finish, lib

LAYER, RMS = lib.FO_NORM_LAYER, lib.FO_NORM_RMS

_NORM_FORWARD = ffi.typeof("fo_norm_forward_args *")
_NORM_BACKWARD = ffi.typeof("fo_norm_backward_args *")
_RELU_FORWARD = ffi.typeof("fo_bias_scale_relu_forward_args *")
_RELU_BACKWARD = ffi.typeof("fo_bias_scale_relu_backward_args *")
_BYTES = ffi.typeof("int64_t *")

# signatures seen, each with its prepared call; a bound keeps a process that
# sees endless shapes (dynamic batch sizes) from growing without end
_MAX_SIGNATURES = 4096


def _remember(cache, key, value):
    if len(cache) >= _MAX_SIGNATURES:
        cache.clear()
    cache[key] = value
    return value


def _prepared(plans, key, make, *args):
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
            _remember(plans, key, plan)
    return plan


def _call_struct(ctype, template, cuda_index, free=None):
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


def _cuda_index(x):
    """x's CUDA device index, None on the CPU: what a plan keeps for _call_struct."""
    return x.get_device() if x.is_cuda else None


def _struct(ctype, device, **fields):
    """A struct of `ctype` with its size, device and the given fields."""
    s = ffi.new(ctype)
    s.struct_size = ffi.sizeof(ctype.item)
    s.device_type, s.device_index = device[0], device[1]
    for name, value in fields.items():
        setattr(s, name, value)
    return s


def stats_dtype(dtype):
    """Norm statistics are fp32, fp64 for fp64."""
    return torch.float64 if dtype is torch.float64 else torch.float32


# the norm family --------------------------------------------------------------
#
# Statistics go in one buffer: rows rstds, then rows means (LayerNorm only),
# one allocation and one saved tensor.


def check_norm(fn, x, residual, weight, bias, normalized_shape):
    """What only Python can see of a norm's arguments; returns
    normalized_shape as a tuple (default: weight's shape, else x's last
    dimension)."""
    _args.check_tensor(fn, "x", x)
    if normalized_shape is None:
        normalized_shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else tuple(x.shape[-1:])
    elif isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    else:
        normalized_shape = tuple(normalized_shape)
    if x.dim() == 0 or not normalized_shape or tuple(x.shape[x.dim() - len(normalized_shape):]) != normalized_shape:
        raise ValueError(
            f"{fn}: normalized_shape {normalized_shape} must be the trailing dimensions of "
            f"x, which has shape {tuple(x.shape)}"
        )
    for name, value in (("weight", weight), ("bias", bias)):
        if value is not None:
            _args.check_companion(fn, name, value, x)
            if value.shape != normalized_shape:
                raise ValueError(
                    f"{fn}: {name} has shape {tuple(value.shape)} but normalized_shape is {normalized_shape}"
                )
    if weight is not None and bias is not None and weight.dtype != bias.dtype:
        raise TypeError(f"{fn}: weight has dtype {weight.dtype} but bias has dtype {bias.dtype}; they must match")
    if residual is not None:
        _args.check_companion(fn, "residual", residual, x)
        _args.check_same_shape(fn, "residual", residual, x)
    return normalized_shape


def _norm_forward_plan(fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape):
    """(template struct, rows, cols, x is used as it is, CUDA index, backward
    template, free structs) for a signature."""
    cols = math.prod(check_norm(fn, x, residual, weight, bias, normalized_shape))
    eps = _args.check_number(fn, "eps", eps)
    dropout_p = _args.check_number(fn, "dropout_p", dropout_p)
    _, rows, _, x_stride = as_rows(x, cols)
    code = DTYPE_CODES[x.dtype]
    param = weight if weight is not None else bias
    residual_stride, residual_code = 0, code
    if residual is not None:
        residual_stride, residual_code = as_rows(residual, cols)[3], DTYPE_CODES[residual.dtype]
    template = _struct(
        _NORM_FORWARD, (lib.FO_DEVICE_CUDA if x.is_cuda else lib.FO_DEVICE_CPU, max(x.get_device(), 0)),
        x_row_stride=x_stride, residual_row_stride=residual_stride, residual_dtype=residual_code,
        param_dtype=DTYPE_CODES[param.dtype] if param is not None else code,
        rows=rows, cols=cols, dtype=code, kind=kind, eps=eps, dropout_p=dropout_p,
    )
    dense = x.is_contiguous() and (residual is None or residual.is_contiguous())
    # then the backward's template for dense gradients, made by the first
    # forward that prepares a backward, and the free structs of calls
    # without and with statistics (which write rstd and mean)
    return template, rows, cols, dense, _cuda_index(x), [None], ([], [])


_norm_forward_plans = {}


def norm_forward(fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape,
                 save_stats, seed_offset=None, prepare_backward=False):
    """(y, residual_out or None, stats or None, seed_offset or None, cols,
    backward or None): the forward pass; stats (for backward) only when
    save_stats, and with prepare_backward the backward's struct for dense
    gradients and a dense h (norm_backward_prepared). The dropout stream
    is seed_offset when given (a (seed, offset) pair: ints, or an int64
    tensor under torch.compile), else drawn from torch's generator of x's
    device."""
    try:
        # only float scalars are remembered: True == 1 == 1.0 as keys
        if type(eps) is not float or type(dropout_p) is not float:
            raise TypeError
        key = (kind, x.shape, x.stride(), x.dtype, x.device, eps, dropout_p, normalized_shape,
               None if weight is None else (weight.shape, weight.dtype, weight.device),
               None if bias is None else (bias.shape, bias.dtype, bias.device),
               None if residual is None else (residual.shape, residual.stride(), residual.dtype,
                                              residual.device))
    except (AttributeError, TypeError):  # not tensors, or eps and dropout_p not floats
        key = None
    template, rows, cols, dense, cuda_index, backward_template, free = _prepared(
        _norm_forward_plans, key, _norm_forward_plan,
        fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape,
    )
    free = free[1 if save_stats else 0]
    a = _call_struct(_NORM_FORWARD, template, cuda_index, free)
    if dense:
        y = torch.empty_like(x)
        x_rows, residual_rows = x, residual
    else:  # views, or copies where no view has dense rows: kept alive until the call returns
        y = dense_like(x)
        x_rows = as_rows(x, cols)[0]
        residual_rows = as_rows(residual, cols)[0] if residual is not None else None
    a.x = x_rows.data_ptr()
    a.y = y.data_ptr()
    # the library reads parameters as cols dense elements
    if weight is not None:
        weight = weight.contiguous()
        a.weight = weight.data_ptr()
    if bias is not None:
        bias = bias.contiguous()
        a.bias = bias.data_ptr()
    residual_out = stats = None
    if residual is not None:
        residual_out = dense_like(residual)
        a.residual_out = residual_out.data_ptr()
        a.residual = residual_rows.data_ptr()
    if save_stats:
        stats = x.new_empty(rows if kind == RMS else 2 * rows, dtype=stats_dtype(x.dtype))
        a.rstd = address = stats.data_ptr()
        if kind == LAYER:
            a.mean = address + rows * stats.itemsize
    if dropout_p > 0:
        if seed_offset is None:
            seed_offset = dropout_seed_offset(x, rows, cols)
        a.seed, a.offset = seed_offset_values(seed_offset)
    status = lib.fo_norm_forward(a)
    if status or SYNC:
        finish(lib.fo_norm_forward, status, (a.device_type, a.device_index))
    backward = None
    if prepare_backward and (residual is not None or dense):
        # y and residual_out stand in for the gradients: dense, of their
        # shapes and dtypes. h (x, or residual_out) is dense too: a
        # saved-tensor hook's copy at h's address then has h's layout.
        if backward_template[0] is None:
            backward_template[0] = _norm_backward_plan(y, residual_out, x if residual is None else residual_out,
                                                       weight, bias, kind, dropout_p, cols, x.dtype)[0]
        template = backward_template[0]
        b = ffi.new(_NORM_BACKWARD, template[0])
        b.stream = a.stream  # autograd runs backward on the forward's stream
        b.h = a.x if residual is None else a.residual_out
        b.seed, b.offset = a.seed, a.offset
        backward = (b, template)
    free.append(a)
    return y, residual_out, stats, seed_offset, cols, backward


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


def _address(tensor):
    return tensor.data_ptr() if tensor is not None else 0


def _norm_backward_plan(dy, dresidual_out, h, weight, bias, kind, dropout_p, cols, x_dtype):
    """(template struct, rows, CUDA index) for a backward signature:
    everything but the addresses, the stream and the workspace."""
    _, rows, _, dy_stride = as_rows(dy, cols)
    code = DTYPE_CODES[x_dtype]
    param = weight if weight is not None else bias
    template = _struct(
        _NORM_BACKWARD, device_args(dy)[:2],
        dy_row_stride=dy_stride, h_row_stride=as_rows(h, cols)[3], h_dtype=DTYPE_CODES[h.dtype],
        dresidual_out_row_stride=as_rows(dresidual_out, cols)[3] if dresidual_out is not None else 0,
        param_dtype=DTYPE_CODES[param.dtype] if param is not None else code,
        rows=rows, cols=cols, dtype=code, kind=kind, dropout_p=dropout_p,
    )
    return template, rows, _cuda_index(dy)


_norm_backward_plans = {}
_norm_backward_workspaces = {}


def norm_backward(dy, dresidual_out, h, stats, weight, bias, kind, dropout_p, cols, seed_offset,
                  x_dtype, has_residual, want_x, want_residual, want_weight, want_bias, share_dx=False):
    """(dx, dresidual, dweight, dbias), None where not wanted. share_dx lets
    dx be the very tensor dresidual is when their values agree (no
    dropout, one dtype)."""
    key = (dy.shape, dy.stride(), dy.dtype, dy.device, h.stride(), h.dtype,
           None if dresidual_out is None else dresidual_out.stride(),
           None if weight is None else weight.dtype, None if bias is None else bias.dtype,
           kind, dropout_p, cols, x_dtype)
    template, _, cuda_index = _prepared(_norm_backward_plans, key, _norm_backward_plan, dy, dresidual_out,
                                        h, weight, bias, kind, dropout_p, cols, x_dtype)
    a = _call_struct(_NORM_BACKWARD, template, cuda_index)
    # views (or dense copies) kept alive until the call returns
    h_rows = as_rows(h, cols)[0]
    a.h = h_rows.data_ptr()
    if dropout_p > 0:
        a.seed, a.offset = seed_offset_values(seed_offset)
    dy_rows = as_rows(dy, cols)[0]
    dro_rows = as_rows(dresidual_out, cols)[0] if dresidual_out is not None else None
    return norm_backward_prepared((a, template), dy_rows, dro_rows, h, stats, weight, bias, x_dtype,
                                  has_residual, want_x, want_residual, want_weight, want_bias, share_dx)


def norm_backward_prepared(backward, dy, dresidual_out, h, stats, weight, bias, x_dtype, has_residual,
                           want_x, want_residual, want_weight, want_bias, share_dx=False):
    """norm_backward from backward = (struct, its template), the struct
    filled but for the incoming gradients, the statistics, the weight, the
    outputs and the workspace: norm_forward's prepared backward (for dense
    dy and dresidual_out) or norm_backward's own. dy and dresidual_out have
    rows as the struct's row strides say."""
    a, template = backward
    shared = share_dx and has_residual and a.dropout_p == 0 and h.dtype is x_dtype and want_x
    dx = dense_like(h, x_dtype) if want_x and not shared else None
    dresidual = dense_like(h) if has_residual and (want_residual or shared) else None
    dweight = dense_like(weight) if weight is not None and want_weight else None
    dbias = dense_like(bias) if bias is not None and want_bias else None
    a.dy = dy_address = dy.data_ptr()
    if dresidual_out is not None:
        a.dresidual_out = dresidual_out.data_ptr()
    if dx is not None:
        a.dx = dx.data_ptr()
    if dresidual is not None:
        a.dresidual = dresidual.data_ptr()
    a.rstd = rstd = stats.data_ptr()
    if a.kind == LAYER:
        a.mean = rstd + a.rows * stats.itemsize
    if weight is not None:
        weight = weight.contiguous()  # the library reads cols dense elements
        a.weight = weight.data_ptr()
    if dweight is not None or dbias is not None:
        a.dweight, a.dbias = _address(dweight), _address(dbias)
        # the plan may turn on the operands' alignment: a coarse class of it
        # is part of the signature (the library alone knows the rule)
        classes = (dy_address % 256, a.h % 256, a.dresidual_out % 256, a.dx % 256, a.dresidual % 256,
                   a.weight % 256)  # 0: absent
        key = (template, dx is None, dresidual is None, dweight is None, dbias is None, classes)
        workspace = _workspace(_norm_backward_workspaces, key, lib.fo_norm_backward_workspace_bytes, a, h)
        if workspace is not None:
            a.workspace, a.workspace_bytes = workspace.data_ptr(), workspace.numel()
    status = lib.fo_norm_backward(a)
    if status or SYNC:
        finish(lib.fo_norm_backward, status, (a.device_type, a.device_index))
    if shared:
        dx = dresidual
    return dx, dresidual if want_residual else None, dweight, dbias


def _workspace(sizes, key, query, args, like):
    """The scratch buffer of this call, from torch's allocator (the library
    never allocates); None when it needs none. Its size is asked of the
    library once a signature (key: everything the answer turns on)."""
    try:
        nbytes = sizes.get(key)
    except TypeError:  # unhashable: not remembered
        key = nbytes = None
    if nbytes is None:
        answer = ffi.new(_BYTES)
        status = query(args, answer)
        if status:
            finish(query, status, (args.device_type, args.device_index))
        nbytes = answer[0] if key is None else _remember(sizes, key, answer[0])
    return like.new_empty(nbytes, dtype=torch.uint8) if nbytes else None


# relu(x * scale + bias) and relu ------------------------------------------------
#
# Forward saves a 1-bit-per-element mask (y > 0) rather than x or y: backward
# reads dy and 1/8 byte an element instead of dy and a whole element.


def check_bias_scale_relu(fn, x, bias, scale):
    """What only Python can see; returns scale as a float."""
    _args.check_tensor(fn, "x", x)
    scale = _args.check_number(fn, "scale", scale)
    if bias is not None:
        _args.check_companion(fn, "bias", bias, x)
        if x.dim() == 0:
            raise ValueError(f"{fn}: x is 0-d; the bias is broadcast over a last dimension")
        if bias.shape != x.shape[-1:]:
            raise ValueError(
                f"{fn}: bias has shape {tuple(bias.shape)} but must be ({x.shape[-1]},), "
                f"the last dimension of x (x has shape {tuple(x.shape)})"
            )
    return scale


def _bias_scale_relu_forward_plan(fn, x, bias, scale):
    """(template struct, rows, cols, x is used as it is, CUDA index, backward
    template, free structs) for a signature."""
    scale = check_bias_scale_relu(fn, x, bias, scale)
    _, rows, cols, x_stride = as_rows(x)
    code = DTYPE_CODES[x.dtype]
    template = _struct(
        _RELU_FORWARD, (lib.FO_DEVICE_CUDA if x.is_cuda else lib.FO_DEVICE_CPU, max(x.get_device(), 0)),
        x_row_stride=x_stride, rows=rows, cols=cols, dtype=code,
        bias_dtype=DTYPE_CODES[bias.dtype] if bias is not None else code, scale=scale,
    )
    # then the backward's template for a dense dy, and the free structs of
    # calls without and with a mask
    return template, rows, cols, x.is_contiguous(), _cuda_index(x), [None], ([], [])


_bias_scale_relu_forward_plans = {}


def bias_scale_relu_forward(fn, x, bias, scale, want_mask, prepare_backward=False):
    """(y, mask or None, backward or None): with prepare_backward (and
    want_mask), the backward's struct for a dense dy
    (bias_scale_relu_backward_prepared)."""
    try:
        if type(scale) is not float:  # True == 1 == 1.0 as keys
            raise TypeError
        key = (x.shape, x.stride(), x.dtype, x.device, scale,
               None if bias is None else (bias.shape, bias.dtype, bias.device))
    except (AttributeError, TypeError):  # not tensors, or scale not a float
        key = None
    template, rows, cols, dense, cuda_index, backward_template, free = _prepared(
        _bias_scale_relu_forward_plans, key, _bias_scale_relu_forward_plan, fn, x, bias, scale,
    )
    free = free[1 if want_mask else 0]
    a = _call_struct(_RELU_FORWARD, template, cuda_index, free)
    if dense:
        y = torch.empty_like(x)
        x_rows = x
    else:  # a view, or a copy where no view has dense rows: kept alive until the call returns
        y = dense_like(x)
        x_rows = as_rows(x)[0]
    a.x, a.y = x_rows.data_ptr(), y.data_ptr()
    if bias is not None:
        bias = bias.contiguous()  # the library reads cols dense elements
        a.bias = bias.data_ptr()
    mask = None
    if want_mask:
        mask = x.new_empty(rows, (cols + 7) // 8, dtype=torch.uint8)
        a.mask = mask.data_ptr()
    status = lib.fo_bias_scale_relu_forward(a)
    if status or SYNC:
        finish(lib.fo_bias_scale_relu_forward, status, (a.device_type, a.device_index))
    backward = None
    if prepare_backward:
        if backward_template[0] is None:  # y stands in for dy: dense, of its shape and dtype
            bias_dtype = bias.dtype if bias is not None else None
            backward_template[0] = _bias_scale_relu_backward_plan(y, a.scale, bias_dtype)[0]
        template = backward_template[0]
        b = ffi.new(_RELU_BACKWARD, template[0])
        b.stream = a.stream  # autograd runs backward on the forward's stream
        b.mask = a.mask
        backward = (b, template)
    free.append(a)
    return y, mask, backward


def _bias_scale_relu_backward_plan(dy, scale, bias_dtype):
    """(template struct, cols, CUDA index) for a backward signature."""
    _, rows, cols, dy_stride = as_rows(dy)
    code = DTYPE_CODES[dy.dtype]
    template = _struct(
        _RELU_BACKWARD, device_args(dy)[:2], dy_row_stride=dy_stride, rows=rows, cols=cols,
        dtype=code, bias_dtype=DTYPE_CODES[bias_dtype] if bias_dtype is not None else code, scale=scale,
    )
    return template, cols, _cuda_index(dy)


_bias_scale_relu_backward_plans = {}
_bias_scale_relu_backward_workspaces = {}


def bias_scale_relu_backward(dy, mask, scale, want_dx, bias_dtype):
    """(dx or None, dbias or None); bias_dtype None means no bias gradient."""
    key = (dy.shape, dy.stride(), dy.dtype, dy.device, scale, bias_dtype)
    template, _, cuda_index = _prepared(_bias_scale_relu_backward_plans, key,
                                        _bias_scale_relu_backward_plan, dy, scale, bias_dtype)
    a = _call_struct(_RELU_BACKWARD, template, cuda_index)
    a.mask = mask.data_ptr()
    dy_rows = as_rows(dy)[0]  # a view, or a dense copy kept alive until the call returns
    return bias_scale_relu_backward_prepared((a, template), dy, dy_rows, want_dx, bias_dtype)


def bias_scale_relu_backward_prepared(backward, dy, dy_rows, want_dx, bias_dtype):
    """bias_scale_relu_backward from backward = (struct, its template), the
    struct filled but for dy, the outputs and the workspace:
    bias_scale_relu_forward's prepared backward (for a dense dy) or
    bias_scale_relu_backward's own. dy_rows is dy with rows as the struct
    says (dy itself where dense)."""
    a, template = backward
    a.dy = dy_rows.data_ptr()
    dx = dbias = None
    if want_dx:
        dx = dense_like(dy)
        a.dx = dx.data_ptr()
    if bias_dtype is not None:
        dbias = dy.new_empty(a.cols, dtype=bias_dtype)
        a.dbias = dbias.data_ptr()
        workspace = _workspace(_bias_scale_relu_backward_workspaces, template,
                               lib.fo_bias_scale_relu_backward_workspace_bytes, a, dy)
        if workspace is not None:
            a.workspace, a.workspace_bytes = workspace.data_ptr(), workspace.numel()
    status = lib.fo_bias_scale_relu_backward(a)
    if status or SYNC:
        finish(lib.fo_bias_scale_relu_backward, status, (a.device_type, a.device_index))
    return dx, dbias


# square: backward needs x (dx = 2 x dy), so forward saves x itself ----------------


def square_forward(x):
    x_view, rows, cols, x_stride = as_rows(x)
    y = dense_like(x)
    device = device_args(x)
    status = lib.fo_square_forward(*device, y.data_ptr(), x_view.data_ptr(), x_stride, rows, cols,
                                   DTYPE_CODES[x.dtype])
    if status or SYNC:
        finish(lib.fo_square_forward, status, device)
    return y


def square_backward(dy, x):
    x_view, rows, cols, x_stride = as_rows(x)
    dy_view, _, _, dy_stride = as_rows(dy)
    dx = dense_like(x)
    device = device_args(x)
    status = lib.fo_square_backward(*device, dx.data_ptr(), dy_view.data_ptr(), dy_stride,
                                    x_view.data_ptr(), x_stride, rows, cols, DTYPE_CODES[x.dtype])
    if status or SYNC:
        finish(lib.fo_square_backward, status, device)
    return dx


# reduce_sum ------------------------------------------------------------------------


_reduce_sum_workspaces = {}


def _reduce_sum_workspace_bytes(device, numel, code):
    """The library's answer for (device type, numel, dtype), which is all it
    depends on: asked once a signature."""
    key = (device[0], numel, code)
    nbytes = _reduce_sum_workspaces.get(key)
    if nbytes is None:
        answer = ffi.new(_BYTES)
        status = lib.fo_reduce_sum_workspace_bytes(device[0], numel, code, answer)
        if status:
            finish(lib.fo_reduce_sum_workspace_bytes, status, device)
        nbytes = _remember(_reduce_sum_workspaces, key, answer[0])
    return nbytes


def reduce_sum(x):
    dense = x.contiguous()
    out = x.new_empty(())
    device = device_args(x)
    code, numel = DTYPE_CODES[x.dtype], x.numel()
    nbytes = _reduce_sum_workspace_bytes(device, numel, code)
    workspace = x.new_empty(nbytes, dtype=torch.uint8) if nbytes else None
    status = lib.fo_reduce_sum(*device, out.data_ptr(), _address(workspace), nbytes,
                               dense.data_ptr(), numel, code)
    if status or SYNC:
        finish(lib.fo_reduce_sum, status, device)
    return out


# swiglu: backward needs gate and up, so forward saves those (the caller's own
# tensors: no extra memory) and not its output ---------------------------------------


def check_swiglu(fn, gate, up):
    _args.check_tensor(fn, "gate", gate)
    _args.check_companion(fn, "up", up, gate, "gate")
    if up.dtype != gate.dtype:
        raise TypeError(f"{fn}: up has dtype {up.dtype} but gate has dtype {gate.dtype}; they must match")
    _args.check_same_shape(fn, "up", up, gate, "gate")


def _swiglu_plan(fn, gate, up):
    """(rows, cols, gate's and up's row strides, dtype code, gate and up are
    used as they are, CUDA index) for a signature."""
    check_swiglu(fn, gate, up)
    _, rows, cols, gate_stride = as_rows(gate)
    return (rows, cols, gate_stride, as_rows(up)[3], DTYPE_CODES[gate.dtype],
            gate.is_contiguous() and up.is_contiguous(), _cuda_index(gate))


_swiglu_plans = {}


def swiglu_forward(fn, gate, up):
    try:
        key = (gate.shape, gate.stride(), gate.dtype, gate.device, up.shape, up.stride(), up.dtype, up.device)
    except AttributeError:  # not tensors: the checks name what is wrong
        key = None
    rows, cols, gate_stride, up_stride, code, dense, cuda_index = _prepared(_swiglu_plans, key, _swiglu_plan,
                                                                            fn, gate, up)
    y = dense_like(gate)
    if not dense:  # views, or copies where no view has dense rows: kept alive until the call returns
        gate, up = as_rows(gate)[0], as_rows(up)[0]
    if cuda_index is None:
        _args.sync_cpu_threads()
        device = (lib.FO_DEVICE_CPU, 0, 0)
    else:
        device = (lib.FO_DEVICE_CUDA, cuda_index, _args.cuda_stream(cuda_index))
    status = lib.fo_swiglu_forward(*device, y.data_ptr(), gate.data_ptr(), gate_stride, up.data_ptr(),
                                   up_stride, rows, cols, code)
    if status or SYNC:
        finish(lib.fo_swiglu_forward, status, device)
    return y


def swiglu_backward(dy, gate, up, want_gate, want_up, over_inputs=False):
    """(dgate or None, dup or None). over_inputs: the gradients are written
    over gate and up where they are dense (the library allows it), for a
    caller that owns them and needs them no more: no new memory."""
    gate_view, rows, cols, gate_stride = as_rows(gate)
    up_view, _, _, up_stride = as_rows(up)
    dy_view, _, _, dy_stride = as_rows(dy)
    over_inputs = over_inputs and gate.is_contiguous() and up.is_contiguous()
    dgate = (gate if over_inputs else dense_like(gate)) if want_gate else None
    dup = (up if over_inputs else dense_like(gate)) if want_up else None
    device = device_args(gate)
    status = lib.fo_swiglu_backward(
        *device, _address(dgate), _address(dup), dy_view.data_ptr(), dy_stride,
        gate_view.data_ptr(), gate_stride, up_view.data_ptr(), up_stride, rows, cols, DTYPE_CODES[gate.dtype],
    )
    if status or SYNC:
        finish(lib.fo_swiglu_backward, status, device)
    return dgate, dup


# geglu: swiglu's shape with gelu (exact or tanh) for silu; backward needs gate
# and up, which forward saves (the caller's own tensors) -----------------------------

_GEGLU_FORWARD = ffi.typeof("fo_geglu_forward_args *")
_GEGLU_BACKWARD = ffi.typeof("fo_geglu_backward_args *")
GELU_APPROXIMATIONS = {"none": lib.FO_GELU_NONE, "tanh": lib.FO_GELU_TANH}


def check_geglu(fn, gate, up, approximate):
    check_swiglu(fn, gate, up)
    if not isinstance(approximate, str) or approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"{fn}: approximate={approximate!r} must be 'tanh' or 'none'")


def _geglu_plan(fn, gate, up, approximate):
    """(forward template, backward template for a dense dy, gate and up are
    used as they are, CUDA index, free forward structs) for a signature."""
    check_geglu(fn, gate, up, approximate)
    _, rows, cols, gate_stride = as_rows(gate)
    device = (lib.FO_DEVICE_CUDA if gate.is_cuda else lib.FO_DEVICE_CPU, max(gate.get_device(), 0))
    shared = dict(gate_row_stride=gate_stride, up_row_stride=as_rows(up)[3], rows=rows, cols=cols,
                  dtype=DTYPE_CODES[gate.dtype], approximate=GELU_APPROXIMATIONS[approximate])
    forward = _struct(_GEGLU_FORWARD, device, **shared)
    backward = _struct(_GEGLU_BACKWARD, device, dy_row_stride=cols, **shared)
    return forward, backward, gate.is_contiguous() and up.is_contiguous(), _cuda_index(gate), []


_geglu_plans = {}


def geglu_forward(fn, gate, up, approximate, prepare_backward=False):
    """(y, backward or None): with prepare_backward, where gate and up are
    dense, the backward's struct for a dense dy (geglu_backward_prepared)."""
    try:
        key = (gate.shape, gate.stride(), gate.dtype, gate.device, up.shape, up.stride(), up.dtype, up.device,
               approximate)
    except AttributeError:  # not tensors: the checks name what is wrong
        key = None
    forward, backward_template, dense, cuda_index, free = _prepared(_geglu_plans, key, _geglu_plan, fn, gate,
                                                                    up, approximate)
    a = _call_struct(_GEGLU_FORWARD, forward, cuda_index, free)
    y = dense_like(gate)
    if not dense:  # views, or copies where no view has dense rows: kept alive until the call returns
        gate, up = as_rows(gate)[0], as_rows(up)[0]
    a.y, a.gate, a.up = y.data_ptr(), gate.data_ptr(), up.data_ptr()
    status = lib.fo_geglu_forward(a)
    if status or SYNC:
        finish(lib.fo_geglu_forward, status, (a.device_type, a.device_index))
    backward = None
    if prepare_backward and dense:
        b = ffi.new(_GEGLU_BACKWARD, backward_template[0])
        b.stream, b.gate, b.up = a.stream, a.gate, a.up  # autograd runs backward on the forward's stream
        backward = b
    free.append(a)
    return y, backward


def geglu_backward_prepared(b, dy_rows, want_gate, want_up, gate):
    """(dgate or None, dup or None) from b, a backward struct filled but for
    dy and the gradients (geglu_forward's, for a dense dy, or
    geglu_backward's own); dy_rows is dy with rows as b says."""
    dgate = dense_like(gate) if want_gate else None
    dup = dense_like(gate) if want_up else None
    b.dy, b.dgate, b.dup = dy_rows.data_ptr(), _address(dgate), _address(dup)
    status = lib.fo_geglu_backward(b)
    if status or SYNC:
        finish(lib.fo_geglu_backward, status, (b.device_type, b.device_index))
    return dgate, dup


def geglu_backward(dy, gate, up, approximate, want_gate, want_up):
    """(dgate or None, dup or None): any layout of dy, gate and up."""
    gate_view, rows, cols, gate_stride = as_rows(gate)
    up_view, _, _, up_stride = as_rows(up)
    dy_view, _, _, dy_stride = as_rows(dy)
    device = device_args(gate)
    b = _struct(_GEGLU_BACKWARD, device, stream=device[2], dy_row_stride=dy_stride, gate=gate_view.data_ptr(),
                gate_row_stride=gate_stride, up=up_view.data_ptr(), up_row_stride=up_stride, rows=rows,
                cols=cols, dtype=DTYPE_CODES[gate.dtype], approximate=GELU_APPROXIMATIONS[approximate])
    return geglu_backward_prepared(b, dy_view, want_gate, want_up, gate)


# clamped swiglu (gpt-oss's experts): one gate_up input, gate and up in
# pairs or halves; backward needs gate_up, which forward saves -----------------------

_CLAMPED_SWIGLU = ffi.typeof("fo_clamped_swiglu_args *")
_GLU_LAYOUTS = {True: lib.FO_GLU_INTERLEAVED, False: lib.FO_GLU_HALVES}


def check_clamped_swiglu(fn, gate_up, alpha, limit, interleaved):
    _args.check_tensor(fn, "gate_up", gate_up)
    if gate_up.dim() == 0 or gate_up.shape[-1] % 2:
        raise ValueError(f"{fn}: gate_up has shape {tuple(gate_up.shape)}; its last dimension must be even "
                         "(gate and up side by side)")
    _args.check_number(fn, "alpha", alpha)
    _args.check_number(fn, "limit", limit)
    if not math.isfinite(alpha):
        raise ValueError(f"{fn}: alpha={alpha!r} must be finite")
    if not limit > 0:
        raise ValueError(f"{fn}: limit={limit!r} must be positive (inf: no clamp)")
    if not isinstance(interleaved, bool):
        raise TypeError(f"{fn}: interleaved must be a bool, got {type(interleaved).__name__}")


@functools.cache
def clamp_grad_at_limit():
    """Whether the installed torch.clamp passes a gradient at its bounds
    (up to torch 2.13 it does; from 2.14 it does not)."""
    x = torch.ones((), requires_grad=True)
    with torch.enable_grad():
        (gradient,) = torch.autograd.grad(x.clamp(max=1.0), x)
    return int(gradient.item() == 1.0)


def _clamped_swiglu_plan(fn, gate_up, alpha, limit, interleaved):
    """(struct template, CUDA index, free structs) for a signature."""
    check_clamped_swiglu(fn, gate_up, alpha, limit, interleaved)
    _, rows, cols2, stride = as_rows(gate_up)
    device = (lib.FO_DEVICE_CUDA if gate_up.is_cuda else lib.FO_DEVICE_CPU, max(gate_up.get_device(), 0))
    template = _struct(_CLAMPED_SWIGLU, device, gate_up_row_stride=stride, rows=rows, cols=cols2 // 2,
                       dtype=DTYPE_CODES[gate_up.dtype], layout=_GLU_LAYOUTS[interleaved], alpha=alpha,
                       limit=limit, grad_at_limit=clamp_grad_at_limit())
    return template, _cuda_index(gate_up), []


_clamped_swiglu_plans = {}


def _clamped_swiglu_call(fn, gate_up, alpha, limit, interleaved, dy=None):
    try:
        key = (gate_up.shape, gate_up.stride(), gate_up.dtype, gate_up.device, alpha, limit, interleaved)
    except AttributeError:  # not a tensor: the checks name what is wrong
        key = None
    template, cuda_index, free = _prepared(_clamped_swiglu_plans, key, _clamped_swiglu_plan, fn, gate_up,
                                           alpha, limit, interleaved)
    a = _call_struct(_CLAMPED_SWIGLU, template, cuda_index, free)
    gate_up_rows = as_rows(gate_up)[0]  # a copy where no view has dense rows: alive until the call returns
    a.gate_up = gate_up_rows.data_ptr()
    if dy is None:
        out = torch.empty((*gate_up.shape[:-1], gate_up.shape[-1] // 2), dtype=gate_up.dtype,
                          device=gate_up.device)
        a.y, entry = out.data_ptr(), lib.fo_clamped_swiglu_forward
    else:
        dy_rows, _, _, a.dy_row_stride = as_rows(dy)
        out = dense_like(gate_up)
        a.dy, a.dgate_up, entry = dy_rows.data_ptr(), out.data_ptr(), lib.fo_clamped_swiglu_backward
    status = entry(a)
    if status or SYNC:
        finish(entry, status, (a.device_type, a.device_index))
    free.append(a)
    return out


def clamped_swiglu_forward(fn, gate_up, alpha, limit, interleaved):
    return _clamped_swiglu_call(fn, gate_up, alpha, limit, interleaved)


def clamped_swiglu_backward(dy, gate_up, alpha, limit, interleaved):
    """dgate_up, laid out as gate_up."""
    return _clamped_swiglu_call("fused_clamped_swiglu", gate_up, alpha, limit, interleaved, dy)


# rope: q and k in one call, read in place through their strides (typically
# proj(x).view(B, T, H, D).transpose(1, 2), never copied); backward, the
# transpose of the rotation, needs only cos and sin --------------------------------

_ROPE = ffi.typeof("fo_rope_args *")
# unsqueeze_dim -> where the heads are: [B, H, T, D] or [B, T, H, D]
_ROPE_LAYOUTS = {1: lib.FO_ROPE_HEADS_FIRST, 2: lib.FO_ROPE_TOKENS_FIRST}


def check_rope(fn, q, k, cos, sin, unsqueeze_dim, interleaved=False):
    """What only Python can see: tensors on one device, dtypes, and the
    shapes against each other (rotary_dim, cos's last dimension, is the
    library's to check: even, at most head_dim)."""
    if not isinstance(interleaved, bool):
        raise TypeError(f"{fn}: interleaved must be a bool, got {type(interleaved).__name__}")
    _args.check_tensor(fn, "q", q)
    for name, value in (("k", k), ("cos", cos), ("sin", sin)):
        _args.check_companion(fn, name, value, q, "q")
    if isinstance(unsqueeze_dim, bool) or not isinstance(unsqueeze_dim, int):
        raise TypeError(f"{fn}: unsqueeze_dim must be an int, got {type(unsqueeze_dim).__name__}")
    if unsqueeze_dim not in _ROPE_LAYOUTS:
        raise ValueError(
            f"{fn}: unsqueeze_dim={unsqueeze_dim} must be 1 (q and k of [batch, heads, tokens, head_dim]) "
            "or 2 ([batch, tokens, heads, head_dim])"
        )
    if k.dtype != q.dtype:
        raise TypeError(f"{fn}: k has dtype {k.dtype} but q has dtype {q.dtype}; they must match")
    if sin.dtype != cos.dtype:
        raise TypeError(f"{fn}: sin has dtype {sin.dtype} but cos has dtype {cos.dtype}; they must match")
    if cos.dtype != q.dtype and not (cos.dtype == torch.float32 and q.dtype in _args.HALF_DTYPES):
        raise TypeError(
            f"{fn}: cos has dtype {cos.dtype} but q has dtype {q.dtype}; cos and sin take q's dtype, "
            "or float32 beside float16 and bfloat16 q"
        )
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(
            f"{fn}: q and k must be 4-d, got shapes {tuple(q.shape)} and {tuple(k.shape)}"
        )
    tokens_dim = 2 if unsqueeze_dim == 1 else 1
    if k.shape[0] != q.shape[0] or k.shape[tokens_dim] != q.shape[tokens_dim] or k.shape[3] != q.shape[3]:
        raise ValueError(
            f"{fn}: k has shape {tuple(k.shape)} but q has shape {tuple(q.shape)}; they must agree "
            "but for the heads"
        )
    batch, tokens = q.shape[0], q.shape[tokens_dim]
    if cos.shape != sin.shape:
        raise ValueError(f"{fn}: sin has shape {tuple(sin.shape)} but cos has shape {tuple(cos.shape)}; they must match")
    if cos.dim() not in (2, 3) or cos.shape[-2] != tokens or (cos.dim() == 3 and cos.shape[0] not in (1, batch)):
        raise ValueError(
            f"{fn}: cos has shape {tuple(cos.shape)} but must be ({batch}, {tokens}, rotary_dim), "
            f"(1, {tokens}, rotary_dim) or ({tokens}, rotary_dim) for q of shape {tuple(q.shape)} "
            f"(unsqueeze_dim={unsqueeze_dim})"
        )
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        raise ValueError(
            f"{fn}: cos or sin requires grad, but no gradient flows to them; pass cos.detach() "
            "and sin.detach() (Hugging Face computes them under torch.no_grad)"
        )


def _rows_contiguous(x):
    """x itself where its last dimension is contiguous (the library reads
    every other stride as it is), else a copy (an expanded gradient)."""
    return x.contiguous() if x.shape[-1] > 1 and x.stride(-1) != 1 else x


def _rope_table(table):
    """(table, its strides as (batch, token, rotary dim)): [T, R] or [B or
    1, T, R]; a table without a batch, or of one, is shared: stride 0."""
    table = _rows_contiguous(table)
    batch_stride = table.stride(0) if table.dim() == 3 and table.shape[0] > 1 else 0
    return table, (batch_stride, table.stride(-2), table.stride(-1))


def rope_output(x):
    """An output for x: laid out as x where x's elements are dense and its
    rows contiguous (q as a transposed projection: attention then returns
    its output in that layout too, which the model's transpose back needs
    no copy of), else dense."""
    out = torch.empty_like(x)  # keeps a dense layout, else contiguous
    return out if out.shape[-1] <= 1 or out.stride(-1) == 1 else x.new_empty(x.shape)


def _rope(entry, q, k, cos, sin, unsqueeze_dim, interleaved, want_q, want_k):
    """(q_out or None, k_out or None) in q's and k's shapes, laid out by
    rope_output: entry (fo_rope_forward or fo_rope_backward) of q and k. A
    tensor not wanted is not read."""
    q = _rows_contiguous(q) if want_q else q
    k = _rows_contiguous(k) if want_k else k
    cos, cos_strides = _rope_table(cos)
    sin, sin_strides = _rope_table(sin)
    q_out = rope_output(q) if want_q else None
    k_out = rope_output(k) if want_k else None
    heads_dim, tokens_dim = (1, 2) if unsqueeze_dim == 1 else (2, 1)
    device = device_args(q)
    a = _struct(
        _ROPE, device, stream=device[2], q_out=_address(q_out), k_out=_address(k_out),
        q=q.data_ptr(), k=k.data_ptr(), q_strides=q.stride(), k_strides=k.stride(),
        cos=cos.data_ptr(), sin=sin.data_ptr(), cos_strides=cos_strides, sin_strides=sin_strides,
        batch=q.shape[0], tokens=q.shape[tokens_dim], q_heads=q.shape[heads_dim],
        k_heads=k.shape[heads_dim], head_dim=q.shape[3], rotary_dim=cos.shape[-1],
        layout=_ROPE_LAYOUTS[unsqueeze_dim], dtype=DTYPE_CODES[q.dtype], cos_dtype=DTYPE_CODES[cos.dtype],
        pairs=lib.FO_ROPE_INTERLEAVED if interleaved else lib.FO_ROPE_HALVES,
        q_out_strides=q_out.stride() if want_q else (0,) * 4,
        k_out_strides=k_out.stride() if want_k else (0,) * 4,
    )
    status = entry(a)
    if status or SYNC:
        finish(entry, status, device)
    return q_out, k_out


def rope_forward(q, k, cos, sin, unsqueeze_dim, interleaved):
    """(q_embed, k_embed), the arguments checked (check_rope)."""
    return _rope(lib.fo_rope_forward, q, k, cos, sin, unsqueeze_dim, interleaved, True, True)


def rope_backward(dq_embed, dk_embed, cos, sin, unsqueeze_dim, interleaved, want_q, want_k):
    """(dq or None, dk or None) from the gradients of q_embed and k_embed."""
    return _rope(lib.fo_rope_backward, dq_embed, dk_embed, cos, sin, unsqueeze_dim, interleaved, want_q, want_k)


# cross-entropy: forward writes each row's loss and, when a gradient is
# wanted, the gradient of the logits in the same pass, which backward only
# scales by the incoming gradient (fo_scale_rows: nothing to do for 1) ------------

_CROSS_ENTROPY = ffi.typeof("fo_cross_entropy_args *")
_SCALE_ROWS = ffi.typeof("fo_scale_rows_args *")
REDUCTION_CODES = {"mean": lib.FO_REDUCTION_MEAN, "sum": lib.FO_REDUCTION_SUM, "none": lib.FO_REDUCTION_NONE}


def _check_target(fn, target, x, x_name):
    """Class indices: int64, on x's device, one for each row of x (its
    leading dimensions)."""
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"{fn}: target must be a torch.Tensor, got {type(target).__name__}")
    if target.dtype != torch.int64:
        raise TypeError(f"{fn}: target has dtype {target.dtype}; class indices must be torch.int64")
    if target.get_device() != x.get_device():
        raise ValueError(
            f"{fn}: target is on {target.device} but {x_name} is on {x.device}; move them to one device"
        )
    if x.dim() == 0:
        raise ValueError(f"{fn}: {x_name} is 0-d; its last dimension must be the classes")
    if target.shape != x.shape[:-1]:
        raise ValueError(
            f"{fn}: target has shape {tuple(target.shape)} but must be {tuple(x.shape[:-1])}, "
            f"the leading dimensions of {x_name} (which has shape {tuple(x.shape)})"
        )


def _cross_entropy_config(fn, ignore_index, label_smoothing, reduction, softcap):
    """(ignore_index, label_smoothing, softcap, reduction) as the calls take
    them: softcap None is 0.0 (none); a user's softcap goes to the library
    as it is, which checks it with label_smoothing."""
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{fn}: ignore_index must be an int, got {type(ignore_index).__name__}")
    if not isinstance(reduction, str) or reduction not in REDUCTION_CODES:
        raise ValueError(f"{fn}: reduction={reduction!r} must be 'mean', 'sum' or 'none'")
    label_smoothing = _args.check_number(fn, "label_smoothing", label_smoothing)
    softcap = 0.0 if softcap is None else _args.check_number(fn, "softcap", softcap)
    return ignore_index, label_smoothing, softcap, reduction


def check_cross_entropy(fn, logits, target, ignore_index, label_smoothing, reduction, softcap):
    """What only Python can see; returns the config tuple the calls take."""
    _args.check_tensor(fn, "logits", logits)
    _check_target(fn, target, logits, "logits")
    return _cross_entropy_config(fn, ignore_index, label_smoothing, reduction, softcap)


def check_linear_cross_entropy(fn, x, weight, bias, target, ignore_index, label_smoothing, reduction,
                               softcap):
    """What only Python can see; returns the config tuple the calls take."""
    _args.check_tensor(fn, "input", x)
    _args.check_companion(fn, "linear_weight", weight, x, "input")
    if bias is not None:
        _args.check_companion(fn, "linear_bias", bias, x, "input")
    for name, value in (("linear_weight", weight), ("linear_bias", bias)):
        if value is not None and value.dtype != x.dtype:
            raise TypeError(
                f"{fn}: {name} has dtype {value.dtype} but input has dtype {x.dtype}; they must match"
            )
    if x.dim() == 0 or weight.dim() != 2 or weight.shape[1] != x.shape[-1]:
        raise ValueError(
            f"{fn}: linear_weight has shape {tuple(weight.shape)} but must be (vocab, "
            f"{x.shape[-1] if x.dim() else 'hidden'}) for input of shape {tuple(x.shape)}"
        )
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(
            f"{fn}: linear_bias has shape {tuple(bias.shape)} but must be ({weight.shape[0]},), "
            "the rows of linear_weight"
        )
    _check_target(fn, target, x, "input")
    return _cross_entropy_config(fn, ignore_index, label_smoothing, reduction, softcap)


def _call_cross_entropy(a):
    status = lib.fo_cross_entropy(a)
    if status or SYNC:
        finish(lib.fo_cross_entropy, status, (a.device_type, a.device_index))


def _cross_entropy_struct(x, rows, vocab, row_stride, ignore_index, label_smoothing, softcap, scale,
                          reduction="none"):
    """The arguments every row of a call shares (scale: None, or the one
    loss-dtype element that multiplies the gradient); the addresses of
    loss, total, logits, dlogits and target are the caller's to write."""
    device = device_args(x)
    return _struct(
        _CROSS_ENTROPY, device, stream=device[2], logits_row_stride=row_stride,
        scale=_address(scale), rows=rows, vocab=vocab, ignore_index=ignore_index,
        dtype=DTYPE_CODES[x.dtype], reduction=REDUCTION_CODES[reduction],
        label_smoothing=label_smoothing, softcap=softcap,
    )


def _cross_entropy_plan(fn, logits, target, ignore_index, label_smoothing, softcap, reduction):
    """(template struct, the reduction, CUDA index, free structs) for a
    signature, the arguments checked (its stream is each call's)."""
    ignore_index, label_smoothing, softcap, reduction = check_cross_entropy(
        fn, logits, target, ignore_index, label_smoothing, reduction, softcap)
    _, rows, vocab, row_stride = as_rows(logits)
    template = _cross_entropy_struct(logits, rows, vocab, row_stride, ignore_index, label_smoothing, softcap,
                                     None, reduction)
    return template, reduction, _cuda_index(logits), []


_cross_entropy_plans = {}


def cross_entropy_forward(fn, logits, target, ignore_index, label_smoothing, softcap, reduction, want_grad):
    """(loss, dlogits or None). loss is 0-d of logits' dtype for mean and
    sum (reduced in fp32, fp64 for fp64, and rounded once, as torch's), and
    each row's fp32 (fp64) loss for none, target's shape. With want_grad,
    dlogits (new, dense, logits' shape and dtype) is the gradient of loss
    for an incoming gradient of 1: of the mean, the sum, or of each row's
    own loss for none. The library reduces the rows itself, counting a
    mean's rows on the device (no synchronization: CUDA graphs capture it).
    softcap None (or 0.0) is none."""
    try:
        # only exact types are remembered: True == 1 and 0 == 0.0 as keys
        if (type(ignore_index) is not int or type(label_smoothing) is not float
                or (softcap is not None and type(softcap) is not float) or type(reduction) is not str):
            raise TypeError
        key = (logits.shape, logits.stride(), logits.dtype, logits.device, target.shape, target.dtype,
               target.device, ignore_index, label_smoothing, softcap, reduction)
    except (AttributeError, TypeError):  # not tensors, or arguments of other types: checked each call
        key = None
    template, reduction, cuda_index, free = _prepared(_cross_entropy_plans, key, _cross_entropy_plan, fn,
                                                      logits, target, ignore_index, label_smoothing, softcap,
                                                      reduction)
    a = _call_struct(_CROSS_ENTROPY, template, cuda_index, free)
    loss_dtype = stats_dtype(logits.dtype)
    if reduction == "none":
        loss_rows, total = logits.new_empty(target.shape, dtype=loss_dtype), None
    else:  # a mean's scale goes after the rows
        loss_rows, total = logits.new_empty(target.numel() + 1, dtype=loss_dtype), logits.new_empty(())
    dlogits = dense_like(logits) if want_grad else None
    logits_rows, targets = as_rows(logits)[0], target.contiguous()  # held through the call
    a.loss, a.total, a.dlogits = loss_rows.data_ptr(), _address(total), _address(dlogits)
    a.logits, a.target = logits_rows.data_ptr(), targets.data_ptr()
    _call_cross_entropy(a)
    free.append(a)
    return loss_rows if total is None else total, dlogits


def _scale_rows_plan(x, scale):
    """(template struct, CUDA index, free structs) for a signature of scale_rows_."""
    per_row = scale.numel() != 1
    rows = scale.numel() if per_row else 1
    template = _struct(_SCALE_ROWS, device_args(x)[:2], rows=rows, cols=x.numel() // rows,
                       dtype=DTYPE_CODES[x.dtype], scale_dtype=DTYPE_CODES[scale.dtype], per_row=int(per_row))
    return template, _cuda_index(x), []


_scale_rows_plans = {}


def scale_rows_(x, scale):
    """x *= scale in place, and returns x (dense): scale is one element (the
    incoming gradient of a mean or a sum), or one for each row of x seen as
    scale.numel() rows (of a per-row loss). A scale of 1 costs nothing."""
    if x.numel() == 0:
        return x
    scale = scale.contiguous()
    key = (x.numel(), x.dtype, x.device, scale.numel(), scale.dtype)
    template, cuda_index, free = _prepared(_scale_rows_plans, key, _scale_rows_plan, x, scale)
    a = _call_struct(_SCALE_ROWS, template, cuda_index, free)
    a.x, a.scale = x.data_ptr(), scale.data_ptr()
    status = lib.fo_scale_rows(a)
    if status or SYNC:
        finish(lib.fo_scale_rows, status, (a.device_type, a.device_index))
    free.append(a)
    return x


# linear cross-entropy: the logits of a chunk of rows at a time, never all of
# them. A chunk's logits take at most 1/16 of the bytes all rows' fp32
# logits would, and at most twice the input's bytes, whatever the row
# count: they are the only memory beyond the inputs, the gradients and a
# few values a row. (The second bound keeps a model's peak, which falls in
# the loss, at Liger's where the vocabulary is large: 512 rows, not 1024,
# for 8192 x 4096 into 128256, at 13% more time for the loss.)


def _chunk_rows(rows, hidden, vocab, element_size):
    limit = min(rows * 4 // (16 * element_size), 2 * rows * hidden // max(vocab, 1))
    if limit >= 256:
        limit -= limit % 128  # whole GEMM tiles
    return max(1, limit)


def _linear_rows(x, target):
    """(x as rows x hidden, the targets dense as rows)."""
    hidden = x.shape[-1]
    return x.reshape(math.prod(x.shape[:-1]), hidden), target.contiguous().view(-1)


def _call_chunk(a, start):
    """One chunk's call; a target the library refuses is named by its row
    in the whole call, not in the chunk."""
    try:
        _call_cross_entropy(a)
    except ValueError as error:
        if not start:
            raise
        message = re.sub(r"target\[(\d+)\]", lambda m: f"target[{start + int(m.group(1))}]", str(error), count=1)
        raise ValueError(message) from None


def _linear_chunks(x, weight, bias, targets, template, loss_rows, row_scale, grads):
    """Runs the rows of x (rows x hidden) a chunk at a time: the chunk's
    logits x_c @ weight.T + bias (torch's GEMM), their losses into loss_rows,
    and, when grads = (grad_input, grad_weight, grad_bias accumulator) has
    any tensor, the logits overwritten by their gradient (times template's
    scale, then row_scale's rows where given), then the gradients from it."""
    want_grad = any(g is not None for g in grads)
    rows = x.shape[0]
    step = _chunk_rows(rows, x.shape[1], weight.shape[0], x.element_size())
    # the library reads the logits as x's dtype: autocast must not change
    # the GEMMs' (it would make bf16 logits of fp32 x); and autograd must
    # not record them, even in a backward with create_graph=True
    with torch.no_grad(), torch.autocast(x.device.type, enabled=False):
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            x_c = x[start:stop]
            logits = torch.mm(x_c, weight.t()) if bias is None else torch.addmm(bias, x_c, weight.t())
            a = ffi.new(_CROSS_ENTROPY, template[0])
            a.rows = stop - start
            a.loss = loss_rows.data_ptr() + start * loss_rows.element_size()
            a.target = targets.data_ptr() + start * targets.element_size()
            a.logits = logits.data_ptr()
            if want_grad:
                a.dlogits = a.logits  # in place: the logits become their gradient
            _call_chunk(a, start)
            if want_grad:
                if row_scale is not None:
                    scale_rows_(logits, row_scale[start:stop])
                _add_chunk_grads(logits, x_c, weight, start, grads)
            del logits  # before the next chunk's are made: one chunk's at a time


def _add_chunk_grads(dlogits, x_c, weight, start, grads):
    """The gradients from a chunk's dlogits: its rows of grad_input, and
    its terms of grad_weight (the first chunk writes it) and grad_bias."""
    grad_input, grad_weight, grad_bias = grads
    if grad_input is not None:
        torch.mm(dlogits, weight, out=grad_input[start:start + dlogits.shape[0]])
    if grad_weight is not None:
        if start == 0:
            torch.mm(dlogits.t(), x_c, out=grad_weight)
        else:
            grad_weight.addmm_(dlogits.t(), x_c)
    if grad_bias is not None:
        grad_bias += dlogits.sum(0, dtype=grad_bias.dtype)


def _linear_grad_buffers(x, rows, weight, bias, want_input, want_weight, want_bias):
    """(grad_input as rows x hidden, grad_weight, the fp32 (fp64) grad_bias
    accumulator), None where not wanted."""
    grad_input = x.new_empty(rows, x.shape[-1]) if want_input else None
    grad_weight = None
    if want_weight:  # the first chunk's GEMM writes it; no chunk when no rows
        grad_weight = dense_like(weight) if rows else torch.zeros_like(weight)
    grad_bias = None
    if want_bias and bias is not None:
        grad_bias = torch.zeros(bias.shape, dtype=stats_dtype(bias.dtype), device=bias.device)
    return grad_input, grad_weight, grad_bias


def _linear_grads(x, weight, bias, grads):
    """The gradients in the inputs' shapes and dtypes."""
    grad_input, grad_weight, grad_bias = grads
    if grad_input is not None:
        grad_input = grad_input.view(x.shape)
    if grad_bias is not None:
        grad_bias = grad_bias.to(bias.dtype)
    return grad_input, grad_weight, grad_bias


def linear_cross_entropy_forward(x, weight, bias, target, ignore_index, label_smoothing, softcap, reduction,
                                 want_input, want_weight, want_bias):
    """(loss, grad_input, grad_weight, grad_bias) of cross_entropy(x @
    weight.T + bias, target), the arguments checked
    (check_linear_cross_entropy). For mean and sum the wanted gradients
    (for an incoming gradient of 1) come with the loss, in this one pass;
    for none they are None: the weight of each row arrives only in
    backward (linear_cross_entropy_backward)."""
    x_rows, targets = _linear_rows(x, target)
    rows, vocab = x_rows.shape[0], weight.shape[0]
    loss_dtype = stats_dtype(x.dtype)
    if reduction == "none":
        want_input = want_weight = want_bias = False
    grads = _linear_grad_buffers(x, rows, weight, bias, want_input, want_weight, want_bias)
    # the chunks' gradients are all scaled by the mean's 1 / count: counted
    # first, on the device (inf for none: the loss is then 0 * inf = NaN,
    # and every gradient row, ignored, is 0, as in torch)
    scale = (targets != ignore_index).sum().to(loss_dtype).reciprocal() if reduction == "mean" else None
    template = _cross_entropy_struct(x, rows, vocab, vocab, ignore_index, label_smoothing, softcap, scale)
    loss_rows = x.new_empty(target.shape, dtype=loss_dtype)
    _linear_chunks(x_rows, weight, bias, targets, template, loss_rows, None, grads)
    loss = loss_rows if reduction == "none" else loss_rows.sum()
    return (loss * scale if reduction == "mean" else loss, *_linear_grads(x, weight, bias, grads))


def linear_cross_entropy_backward(dloss, x, weight, bias, target, ignore_index, label_smoothing, softcap,
                                  want_input, want_weight, want_bias):
    """(grad_input, grad_weight, grad_bias), None where not wanted, of the
    per-row losses (reduction none) weighted by dloss (target's shape): the
    logits again, a chunk at a time, their gradient scaled row by row."""
    x_rows, targets = _linear_rows(x, target)
    rows, vocab = x_rows.shape[0], weight.shape[0]
    grads = _linear_grad_buffers(x, rows, weight, bias, want_input, want_weight, want_bias)
    template = _cross_entropy_struct(x, rows, vocab, vocab, ignore_index, label_smoothing, softcap, None)
    loss_rows = x.new_empty(rows, dtype=stats_dtype(x.dtype))  # not needed, but written
    _linear_chunks(x_rows, weight, bias, targets, template, loss_rows, dloss.contiguous().view(-1), grads)
    return _linear_grads(x, weight, bias, grads)
