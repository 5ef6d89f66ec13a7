"""Bad input raises a clear exception naming the function, the argument and
the value, before anything runs; the library keeps working afterwards."""

import pytest
import torch

import fused_ops_py as fo
from fused_ops_py._ffi import check, lib
from conftest import requires_gpu


def still_works():
    x = torch.tensor([[-1.0, 2.0]])
    assert torch.equal(fo.relu(x), torch.tensor([[0.0, 2.0]]))


X = torch.randn(4, 8)
B = torch.randn(8)

CASES = [
    # (call, exception, words the message must contain)
    (lambda: fo.relu([1.0, 2.0]), TypeError, ["relu", "x", "list"]),
    (lambda: fo.relu(torch.ones(3, dtype=torch.int32)), TypeError, ["relu", "x", "torch.int32"]),
    (lambda: fo.square(torch.ones(3, dtype=torch.bool)), TypeError, ["square", "x", "torch.bool"]),
    (lambda: fo.reduce_sum(torch.ones(3, dtype=torch.complex64)), TypeError, ["reduce_sum", "complex64"]),
    (lambda: fo.square(torch.ones(3, dtype=torch.int64)), TypeError, ["square", "int64"]),
    (lambda: fo.fused_bias_scale_relu(X, torch.randn(7)), ValueError, ["fused_bias_scale_relu", "bias", "(7,)", "(8,)"]),
    (lambda: fo.fused_bias_scale_relu(X, torch.randn(2, 8)), ValueError, ["bias", "(2, 8)"]),
    (lambda: fo.fused_bias_scale_relu(X, B.double()), TypeError, ["bias", "torch.float64", "torch.float32"]),
    (lambda: fo.fused_bias_scale_relu(X.half(), B.bfloat16()), TypeError, ["bias", "torch.bfloat16"]),
    (lambda: fo.fused_bias_scale_relu(X, B.int()), TypeError, ["bias", "torch.int32"]),
    (lambda: fo.fused_bias_scale_relu(X, "bias"), TypeError, ["bias", "str"]),
    (lambda: fo.fused_bias_scale_relu(X, B, float("nan")), ValueError, ["scale", "nan"]),
    (lambda: fo.fused_bias_scale_relu(X, B, float("inf")), ValueError, ["scale", "inf"]),
    (lambda: fo.fused_bias_scale_relu(X, B, "2"), TypeError, ["scale", "str"]),
    (lambda: fo.fused_bias_scale_relu(X, B, torch.tensor(2.0)), TypeError, ["scale", "Tensor"]),
    (lambda: fo.fused_bias_scale_relu(torch.tensor(1.0), torch.ones(1)), ValueError, ["x is 0-d"]),
    (lambda: fo.FusedBiasScaleReLU(8)(torch.randn(3, 5)), ValueError, ["bias", "(8,)", "(5,)"]),
    (lambda: fo.relu(torch.randn(3, device="meta")), ValueError, ["relu", "meta"]),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_bad_input(case):
    call, exception, words = CASES[case]
    with pytest.raises(exception) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    still_works()


@pytest.mark.parametrize(
    "call, exception, words",
    [
        (lambda: lib.fo_square_forward(lib.FO_DEVICE_CPU, 0, 0, 0, 0, 1, 1, 1, 99),
         TypeError, ["fo_square_forward", "dtype=99"]),
        (lambda: lib.fo_square_forward(5, 0, 0, 0, 0, 1, 1, 1, 0),
         ValueError, ["fo_square_forward", "device_type=5"]),
        (lambda: lib.fo_square_forward(lib.FO_DEVICE_CPU, 0, 0, 0, 0, 1, -1, 1, 0),
         ValueError, ["rows=-1"]),
        (lambda: lib.fo_square_forward(lib.FO_DEVICE_CPU, 0, 0, 16, 0, 1, 1, 1, 0),
         ValueError, ["x is a null address"]),
        (lambda: lib.fo_bias_scale_relu_forward(lib.FO_DEVICE_CPU, 0, 0, 16, 0, 16, 1, 0, 1, 1, 3, 0, 1.0),
         TypeError, ["bias dtype float32", "x dtype float64"]),
    ],
)
def test_library_statuses_become_exceptions(call, exception, words):
    with pytest.raises(exception) as info:
        check(call())
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    still_works()


@requires_gpu()
def test_bias_on_another_device():
    with pytest.raises(ValueError, match="bias is on cuda:0 but x is on cpu"):
        fo.fused_bias_scale_relu(X, B.cuda())
    with pytest.raises(ValueError, match="bias is on cpu but x is on cuda:0"):
        fo.fused_bias_scale_relu(X.cuda(), B)
    still_works()
