"""Bad input raises a clear exception naming the function, the argument and
the value, before anything runs; the library keeps working afterwards."""

import pytest
import torch
from conftest import requires_gpu

import fused_ops_py as fo
from fused_ops_py._ffi import check, ffi, lib


def still_works():
    x = torch.tensor([[-1.0, 2.0]])
    assert torch.equal(fo.relu(x), torch.tensor([[0.0, 2.0]]))


def cases(d):
    """(call, exception, words the message must contain) on device d."""
    X, B = torch.randn(4, 8, device=d), torch.randn(8, device=d)
    W, R = torch.randn(8, device=d), torch.randn(4, 8, device=d)
    Q, C = torch.randn(1, 2, 3, 8, device=d), torch.randn(1, 3, 8, device=d)
    return [
        (lambda: fo.relu([1.0, 2.0]), TypeError, ["relu", "x", "list"]),
        (lambda: fo.relu(torch.ones(3, dtype=torch.int32, device=d)), TypeError, ["relu", "x", "torch.int32"]),
        (lambda: fo.square(torch.ones(3, dtype=torch.bool, device=d)), TypeError, ["square", "x", "torch.bool"]),
        (lambda: fo.reduce_sum(torch.ones(3, dtype=torch.complex64, device=d)), TypeError, ["reduce_sum", "complex64"]),
        (lambda: fo.square(torch.ones(3, dtype=torch.int64, device=d)), TypeError, ["square", "int64"]),
        (lambda: fo.relu(torch.ones(3, dtype=torch.uint8, device=d)), TypeError, ["relu", "uint8"]),
        (
            lambda: fo.fused_bias_scale_relu(X, torch.randn(7, device=d)),
            ValueError,
            ["fused_bias_scale_relu", "bias", "(7,)", "(8,)"],
        ),
        (lambda: fo.fused_bias_scale_relu(X, torch.randn(2, 8, device=d)), ValueError, ["bias", "(2, 8)"]),
        (
            lambda: fo.fused_bias_scale_relu(X, B.double()),
            TypeError,
            ["fo_bias_scale_relu_forward", "bias dtype float64", "x dtype float32"],
        ),
        (
            lambda: fo.fused_bias_scale_relu(X.half(), B.bfloat16()),
            TypeError,
            ["bias dtype bfloat16", "x dtype float16"],
        ),
        (lambda: fo.fused_bias_scale_relu(X, B.int()), TypeError, ["bias", "torch.int32"]),
        (lambda: fo.fused_bias_scale_relu(X, "bias"), TypeError, ["bias", "str"]),
        (lambda: fo.fused_bias_scale_relu(X, B, float("nan")), ValueError, ["scale", "nan"]),
        (lambda: fo.fused_bias_scale_relu(X, B, float("inf")), ValueError, ["scale", "inf"]),
        (lambda: fo.fused_bias_scale_relu(X, B, "2"), TypeError, ["scale", "str"]),
        (lambda: fo.fused_bias_scale_relu(X, B, torch.tensor(2.0)), TypeError, ["scale", "Tensor"]),
        (
            lambda: fo.fused_bias_scale_relu(torch.tensor(1.0, device=d), torch.ones(1, device=d)),
            ValueError,
            ["x is 0-d"],
        ),
        (lambda: fo.FusedBiasScaleReLU(8).to(d)(torch.randn(3, 5, device=d)), ValueError, ["bias", "(8,)", "(5,)"]),
        (lambda: fo.relu(torch.randn(3, device="meta")), ValueError, ["relu", "meta"]),
        (lambda: fo.fused_layer_norm(X, torch.randn(7, device=d)), ValueError, ["fused_layer_norm", "(7,)", "(4, 8)"]),
        (lambda: fo.fused_layer_norm(X, W, torch.randn(9, device=d)), ValueError, ["bias", "(9,)", "(8,)"]),
        (lambda: fo.fused_layer_norm(X, normalized_shape=(3, 8)), ValueError, ["(3, 8)", "(4, 8)"]),
        (lambda: fo.fused_layer_norm(X, eps=0.0), ValueError, ["fo_norm_forward", "eps=0 "]),
        (lambda: fo.fused_layer_norm(X, eps=-1e-5), ValueError, ["eps=-1e-05"]),
        (lambda: fo.fused_rms_norm(X, eps=float("nan")), ValueError, ["eps=nan"]),
        (lambda: fo.fused_rms_norm(X, eps=float("inf")), ValueError, ["eps=inf"]),
        (lambda: fo.fused_layer_norm(X, W.double()), TypeError, ["param_dtype float64", "dtype float32"]),
        (lambda: fo.fused_layer_norm(X.half(), W.float(), W.half()), TypeError, ["bias", "torch.float16"]),
        (lambda: fo.fused_layer_norm(X.int()), TypeError, ["x", "torch.int32"]),
        (lambda: fo.fused_rms_norm(X.to(torch.complex64)), TypeError, ["x", "complex64"]),
        (lambda: fo.fused_rms_norm(torch.tensor(1.0, device=d)), ValueError, ["fused_rms_norm", "()"]),
        (lambda: fo.fused_add_layer_norm(X, torch.randn(4, 9, device=d)), ValueError, ["residual", "(4, 9)", "(4, 8)"]),
        (lambda: fo.fused_add_layer_norm(X, R.double()), TypeError, ["residual_dtype float64", "dtype float32"]),
        (lambda: fo.fused_add_layer_norm(X, R, dropout_p=1.0), ValueError, ["dropout_p=1 ", "[0, 1)"]),
        (lambda: fo.fused_add_rms_norm(X, R, dropout_p=-0.1), ValueError, ["dropout_p=-0.1"]),
        (lambda: fo.fused_add_rms_norm(X, R, dropout_p=float("nan")), ValueError, ["dropout_p=nan"]),
        (lambda: fo.fused_add_rms_norm(X, R, dropout_p="0.1"), TypeError, ["dropout_p", "str"]),
        (lambda: fo.FusedLayerNorm(8).to(d)(torch.randn(3, 5, device=d)), ValueError, ["(8,)", "(3, 5)"]),
        (lambda: fo.FusedRMSNorm(8, eps=0.0).to(d)(X), ValueError, ["eps=0 "]),
        (lambda: fo.fused_swiglu(X, torch.randn(4, 9, device=d)), ValueError, ["fused_swiglu", "(4, 9)"]),
        (lambda: fo.fused_swiglu(X, R.half()), TypeError, ["up", "torch.float16"]),
        (lambda: fo.fused_dyt(X, torch.ones(2, device=d), W, W), ValueError, ["fused_dyt", "alpha", "(2,)"]),
        (lambda: fo.fused_dyt(X, W[:1], torch.ones(7, device=d)), ValueError, ["weight", "(7,)", "(8,)"]),
        (lambda: fo.fused_dyt(X, W[:1].double(), W.double()), TypeError, ["float64", "x has torch.float32"]),
        (
            lambda: fo.fused_quantize_fp8(X, recipe="blockwise"),
            ValueError,
            ["fused_quantize_fp8", "recipe='blockwise'"],
        ),
        (lambda: fo.FusedDyT(8).to(d)(torch.randn(3, 5, device=d)), ValueError, ["weight", "(8,)", "(3, 5)"]),
        (lambda: fo.fused_swiglu(X.int(), R), TypeError, ["gate", "int32"]),
        (lambda: fo.fused_geglu(X, torch.randn(4, 9, device=d)), ValueError, ["fused_geglu", "(4, 9)"]),
        (lambda: fo.fused_geglu(X, R.half()), TypeError, ["up", "torch.float16"]),
        (lambda: fo.fused_geglu(X, R, approximate="erf"), ValueError, ["approximate='erf'"]),
        (lambda: fo.fused_rope(Q, Q, C[..., :7], C[..., :7]), ValueError, ["fo_rope_forward", "rotary_dim=7"]),
        (lambda: fo.fused_rope(Q, Q.half(), C, C), TypeError, ["k", "torch.float16"]),
        (lambda: fo.fused_rope(Q, Q, C[:, :2], C[:, :2]), ValueError, ["fused_rope", "cos has shape (1, 2, 8)"]),
        (lambda: fo.fused_rope(Q, Q, C, C, unsqueeze_dim=0), ValueError, ["unsqueeze_dim=0"]),
    ]


CASE_COUNT = len(cases("cpu"))


def test_the_matrix_has_at_least_40_cases():
    assert CASE_COUNT >= 40


@pytest.mark.parametrize("case", range(CASE_COUNT))
def test_bad_input(case, device):
    call, exception, words = cases(device)[case]
    with pytest.raises(exception) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    still_works()
    if device.type == "cuda":  # the CUDA context is healthy too
        torch.testing.assert_close(fo.relu(torch.tensor([-1.0, 2.0], device=device)).cpu(), torch.tensor([0.0, 2.0]))


def relu_args(**fields):
    """A CPU fo_bias_scale_relu_forward_args of one row and one column."""
    args = ffi.new("fo_bias_scale_relu_forward_args *")
    args.struct_size = ffi.sizeof("fo_bias_scale_relu_forward_args")
    args.device_type, args.rows, args.cols, args.x_row_stride, args.scale = lib.FO_DEVICE_CPU, 1, 1, 1, 1.0
    for name, value in fields.items():
        setattr(args, name, value)
    return args


def square_args(**fields):
    """A CPU fo_square_forward_args of one row and one column, fp32."""
    args = ffi.new("fo_square_forward_args *")
    args.struct_size = ffi.sizeof("fo_square_forward_args")
    args.device_type, args.rows, args.cols, args.x_row_stride = lib.FO_DEVICE_CPU, 1, 1, 1
    for name, value in fields.items():
        setattr(args, name, value)
    return args


@pytest.mark.parametrize(
    "call, exception, words",
    [
        (lambda: lib.fo_square_forward(square_args(dtype=99)), TypeError, ["fo_square_forward", "dtype=99"]),
        (lambda: lib.fo_square_forward(square_args(device_type=5)), ValueError, ["fo_square_forward", "device_type=5"]),
        (lambda: lib.fo_square_forward(square_args(rows=-1)), ValueError, ["rows=-1"]),
        (lambda: lib.fo_square_forward(square_args(y=16)), ValueError, ["x is a null address"]),
        (lambda: lib.fo_square_forward(square_args(y=16, x=16, reserved=1)), ValueError, ["reserved=1"]),
        (
            lambda: lib.fo_bias_scale_relu_forward(relu_args(y=16, x=16, bias=16, dtype=3, bias_dtype=0)),
            TypeError,
            ["bias dtype float32", "x dtype float64"],
        ),
        (lambda: lib.fo_bias_scale_relu_forward(relu_args(y=16, x=16, scale=float("nan"))), ValueError, ["scale=nan"]),
        (lambda: lib.fo_bias_scale_relu_forward(relu_args(struct_size=7)), ValueError, ["struct_size=7"]),
    ],
)
def test_library_statuses_become_exceptions(call, exception, words):
    with pytest.raises(exception) as info:
        check(call())
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    still_works()


@requires_gpu()
def test_operands_on_another_device():
    X, B = torch.randn(4, 8), torch.randn(8)
    with pytest.raises(ValueError, match="bias is on cuda:0 but x is on cpu"):
        fo.fused_bias_scale_relu(X, B.cuda())
    with pytest.raises(ValueError, match="bias is on cpu but x is on cuda:0"):
        fo.fused_bias_scale_relu(X.cuda(), B)
    with pytest.raises(ValueError, match="weight is on cuda:0 but x is on cpu"):
        fo.fused_layer_norm(X, B.cuda())
    with pytest.raises(ValueError, match="residual is on cpu but x is on cuda:0"):
        fo.fused_add_rms_norm(X.cuda(), X)
    with pytest.raises(ValueError, match="up is on cpu but gate is on cuda:0"):
        fo.fused_swiglu(X.cuda(), X)
    with pytest.raises(ValueError, match="up is on cpu but gate is on cuda:0"):
        fo.fused_geglu(X.cuda(), X)
    with pytest.raises(ValueError, match="weight is on cpu but x is on cuda:0"):
        fo.fused_dyt(X.cuda(), B[:1].cuda(), B)
    Q, C = torch.randn(1, 2, 3, 8), torch.randn(3, 8)
    with pytest.raises(ValueError, match="cos is on cpu but q is on cuda:0"):
        fo.fused_rope(Q.cuda(), Q.cuda(), C, C.cuda())
    still_works()


@requires_gpu(2)
def test_weight_on_another_gpu():
    with pytest.raises(ValueError, match="weight is on cuda:1 but x is on cuda:0"):
        fo.fused_rms_norm(torch.randn(4, 8, device="cuda:0"), torch.randn(8, device="cuda:1"))
    still_works()
