"""FUSED_OPS_PY_SYNC=1: every CUDA launch is followed by a synchronize, so
an asynchronous fault is reported by the op that caused it."""

import os
import subprocess
import sys
import tempfile

from conftest import requires_gpu


def run(code, **env):
    # from a neutral directory: `python -c` puts the working directory first
    # on sys.path, and the source tree's package has no library beside it
    return subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )


def test_sync_variable_is_read():
    code = "from fused_ops_py import _ffi; print(_ffi.SYNC)"
    assert run(code, FUSED_OPS_PY_SYNC="1").stdout.strip() == "True"
    assert run(code, FUSED_OPS_PY_SYNC="0").stdout.strip() == "False"


def test_sync_error_names_the_entry_point():
    # cffi's function objects have no __name__: the sync error looks the
    # name up in lib (a GPU fault in this message once read "<cdata>")
    from fused_ops_py._ffi import entry_point_name, lib

    assert entry_point_name(lib.fo_bias_scale_relu_backward) == "fo_bias_scale_relu_backward"
    assert entry_point_name(lib.fo_norm_forward) == "fo_norm_forward"


@requires_gpu()
def test_sync_names_the_op_whose_kernel_faulted():
    # A mask address far outside any allocation makes the backward kernel
    # fault asynchronously; with the variable set, the error names the op.
    code = (
        "import torch\n"
        "from fused_ops_py._ffi import ffi, finish, lib\n"
        "dy = torch.ones(64, 64, device='cuda'); dx = torch.empty_like(dy)\n"
        "a = ffi.new('fo_bias_scale_relu_backward_args *')\n"
        "a.struct_size = ffi.sizeof('fo_bias_scale_relu_backward_args')\n"
        "a.device_type, a.dx, a.dy = lib.FO_DEVICE_CUDA, dx.data_ptr(), dy.data_ptr()\n"
        "a.dy_row_stride, a.mask = 64, 16\n"
        "a.rows, a.cols, a.scale = 64, 64, 1.0\n"
        "finish(lib.fo_bias_scale_relu_backward, lib.fo_bias_scale_relu_backward(a), (lib.FO_DEVICE_CUDA, 0))\n"
    )
    result = run(code, FUSED_OPS_PY_SYNC="1")
    assert result.returncode != 0
    assert "fo_bias_scale_relu_backward: the kernels it launched on cuda:0 failed" in result.stderr


@requires_gpu()
def test_gpu_the_library_was_not_built_for():
    # bench/gpu_check.sh builds a library for an architecture list without
    # this GPU's and no PTX, and names it here
    import pytest
    import torch

    path = os.environ.get("FO_TEST_OTHER_ARCH_LIBRARY")
    if not path:
        pytest.skip("FO_TEST_OTHER_ARCH_LIBRARY names no library built for other GPUs")
    major, minor = torch.cuda.get_device_capability(0)
    code = "import torch, fused_ops_py as fo; fo.relu(torch.ones(8, device='cuda'))"
    result = run(code, FUSED_OPS_PY_LIBRARY=path)
    assert result.returncode != 0
    assert f"this GPU is sm_{major}{minor}" in result.stderr
    assert "rebuild with -Dgpu_archs=" in result.stderr
