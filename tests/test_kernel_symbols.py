"""The CUDA library's host side names each kernel once: a plan that asks
about one instantiation of a kernel template while the launch takes another
fails on the GPU (cudaErrorInvalidResourceHandle), so it is checked here,
from the symbol table, on machines without one. g++ 12 once made a
captured tag's decltype a reference inside a nested lambda, which gave the
norm backward's plan a kernel<T, H&, P> of its own."""

import re
import shutil
import subprocess

import pytest

import fused_ops_py
from fused_ops_py._ffi import lib


def kernel_names():
    """The demangled names of the library's kernel host stubs."""
    out = subprocess.run(
        ["nm", "-C", "--defined-only", fused_ops_py.library_path()], capture_output=True, text=True, check=True
    ).stdout
    names = set()
    for line in out.splitlines():
        match = re.search(r" [tT] (?:void )?(.*_kernel<.*?>)\(", line)
        if match:
            names.add(match.group(1))
    return names


@pytest.mark.skipif(not lib.fo_cuda_built(), reason="a CPU-only library has no kernels")
@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_no_kernel_is_instantiated_with_a_reference_type():
    names = kernel_names()
    assert any("norm_backward_shared_kernel<" in name for name in names), sorted(names)[:5]
    with_references = sorted(name for name in names if re.search(r"[\w>]&[,>]", name))
    assert not with_references, f"kernels instantiated with reference types: {with_references}"
