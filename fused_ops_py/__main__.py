"""python -m fused_ops_py            the environment report a bug report needs
python -m fused_ops_py demo       train a small model with the fused ops and
                                  compare it with the same model in plain torch
python -m fused_ops_py selftest   every op once on every device against torch"""

import os
import platform
import sys


def env_report():
    import torch

    import fused_ops_py
    from fused_ops_py._ffi import cuda_version_text, driver_version, ffi, lib, library_origin

    def text(pointer):
        return ffi.string(pointer).decode()

    library_version = lib.fo_version()
    cuda_runtime = lib.fo_cuda_runtime_version()
    rows = [
        ("fused_ops_py", fused_ops_py.__version__),
        ("library", "{}.{}.{}".format(library_version // 10000, library_version // 100 % 100, library_version % 100)),
        ("library path", fused_ops_py.library_path()),
        ("library chosen", library_origin),
        ("CUDA driver supports", cuda_version_text(driver_version) if driver_version else "no driver"),
        ("ABI version", lib.fo_abi_version()),
        ("CUDA built in", "yes" if lib.fo_cuda_built() else "no (CPU-only library)"),
        ("GPU code built", text(lib.fo_cuda_archs()) or "-"),
        ("CUDA runtime (library)", cuda_version_text(cuda_runtime) if cuda_runtime else "-"),
        (
            "CPU kernels",
            f"{text(lib.fo_cpu_isa())} (FUSED_OPS_PY_CPU_ISA={os.environ.get('FUSED_OPS_PY_CPU_ISA', '')})",
        ),
        ("python", platform.python_version()),
        ("platform", platform.platform()),
        ("torch", torch.__version__),
        ("torch CUDA", torch.version.cuda or "-"),
        ("GPUs visible", torch.cuda.device_count() if torch.cuda.is_available() else 0),
    ]
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(index)
            rows.append((f"  cuda:{index}", f"{torch.cuda.get_device_name(index)} (sm_{major}{minor})"))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def main(argv):
    if argv[1:2] == ["demo"]:
        from fused_ops_py.demo import main as demo

        return demo()
    if argv[1:2] == ["selftest"]:
        from fused_ops_py.selftest import main as selftest

        return selftest()
    if argv[1:]:
        print(__doc__)
        return 2
    env_report()
    return 0


if __name__ == "__main__":
    status = main(sys.argv)
    # Leave without tearing the interpreter down. Once backward has run on a
    # GPU, torch's autograd device threads can abort the process during
    # shutdown ("terminate called without an active exception", exit status
    # 134; pytorch/pytorch#38230, #50893): the H200 run saw it in 1 of 5
    # selftests, after every op had passed. All output is written by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
