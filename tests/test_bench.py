"""The benchmark tools on the CPU, small: every provider's output is checked
against eager inside bench_ops (a BAD check makes it return 1), and the
files it writes hold what its summary says. No timing is asserted."""

import csv
import importlib.util
import json
import math
import sys
import types
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_bench_ops_checks_every_provider_and_writes_its_tables(tmp_path):
    bench_ops = load("bench_ops")
    status = bench_ops.main(
        [
            "--device",
            "cpu",
            "--quick",
            "--ops",
            "layer_norm,bias_scale_relu,reduce_sum",
            "--providers",
            "fused,eager",
            "--shapes",
            "16x64",
            "--out",
            str(tmp_path),
        ]
    )
    assert status == 0
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    # every direction bench_ops.OPS lists for each op, for both providers
    expected = {
        (op, d, p)
        for p in ("fused", "eager")
        for op, dirs in bench_ops.OPS.items()
        if op in ("layer_norm", "bias_scale_relu", "reduce_sum")
        for d in dirs
    }
    assert {(r["op"], r["direction"], r["provider"]) for r in rows} == expected
    assert all(r["check"] == "ok" for r in rows)
    assert all(float(r["call_ms"]) > 0 and float(r["gbs"]) > 0 for r in rows)
    # the byte formula: LayerNorm fwd moves x in, y out, weight and bias, and
    # two fp32 statistics a row
    ln = next(r for r in rows if r["op"] == "layer_norm" and r["direction"] == "fwd")
    assert int(ln["bytes"]) == 2 * 16 * 64 * 4 + 2 * 64 * 4 + 2 * 16 * 4
    assert "| layer_norm | fwd | 16x64 |" in (tmp_path / "summary.md").read_text()


def test_bench_overhead_times_every_op_in_every_mode(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # it imports bench_ops, as when run as a script
    bench_overhead = load("bench_overhead")
    bench_overhead.main(
        [
            "--device",
            "cpu",
            "--repeats",
            "1",
            "--loop-ms",
            "0.1",
            "--max-calls",
            "2",
            "--shapes",
            "8x64,3x5",
            "--out",
            str(tmp_path),
        ]
    )
    with open(tmp_path / "overhead.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["op"], r["shape"], r["dtype"], r["mode"]) for r in rows] == [
        (op, shape, dtype, mode)
        for op in bench_overhead.OPS
        for shape in ("8x64", "3x5")
        for dtype in ("bf16", "fp32")
        for mode in ("train", "fwdbwd", "infer")
    ]
    for r in rows:
        ratio = float(r["ours_us"]) / float(r["torch_us"])
        assert float(r["torch_us"]) > 0 and float(r["ours_us"]) > 0
        assert float(r["ratio"]) == pytest.approx(ratio, rel=0.02, abs=0.01)
        assert float(r["target"]) == bench_overhead.TARGETS[r["mode"]]
        assert r["met"] == str(float(r["ratio"]) <= float(r["target"]))
        assert float(r["floor_us"]) > 0
        assert float(r["floor_ratio"]) == pytest.approx(float(r["floor_us"]) / float(r["torch_us"]), rel=0.02, abs=0.01)
    met = sum(r["met"] == "True" for r in rows)
    over = sum(float(r["floor_ratio"]) > float(r["target"]) for r in rows)
    summary = (tmp_path / "overhead.md").read_text()
    assert f"**{met} met, {len(rows) - met} missed** of {len(rows)};" in summary
    assert f"is itself over the target in {over} rows." in summary


def test_plot_draws_one_png_per_op_and_direction(tmp_path):
    pytest.importorskip("matplotlib")
    plot = load("plot")
    rows = [
        dict(
            op="relu",
            direction="fwd",
            rows=4096,
            cols=cols,
            dtype="bf16",
            provider=p,
            gbs=gbs,
            fraction_of_ceiling=gbs / 4000,
            check="ok",
        )
        for cols in (1024, 4096)
        for p, gbs in (("fused", 3000.0), ("eager", 2000.0))
    ] + [
        dict(
            op="relu",
            direction="fwd",
            rows=8,
            cols=64,
            dtype="bf16",
            provider="fused",
            gbs=1.0,
            fraction_of_ceiling=0.0,
            check="ok",
        )
    ]  # tiny: left out
    with open(tmp_path / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    series, ceiling = plot.load(tmp_path, "bf16")
    assert ceiling == pytest.approx(4000)
    assert series[("relu", "fwd")]["fused"] == {1024: (4096, 3000.0), 4096: (4096, 3000.0)}
    written = plot.plot(tmp_path, "bf16")
    assert [p.name for p in written] == ["relu_fwd_bf16.png"]
    assert written[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_combine_joins_parts_and_a_rerun_replaces_its_rows(tmp_path):
    bench_ops, combine = load("bench_ops"), load("combine")
    base = ["--device", "cpu", "--quick", "--providers", "fused,eager", "--shapes", "16x64"]
    for part, ops in (("a", "relu,reduce_sum"), ("b", "square"), ("c", "reduce_sum")):
        assert bench_ops.main(base + ["--ops", ops, "--out", str(tmp_path / part)]) == 0
    parts = [tmp_path / p for p in "abc"]
    _, count = combine.combine(tmp_path / "all", parts)
    with open(tmp_path / "all" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    # relu fwd+bwd, square fwd+bwd, reduce_sum fwd; two providers each; part
    # c's reduce_sum replaced part a's instead of doubling it
    assert count == len(rows) == 2 * 5
    with open(tmp_path / "c" / "results.csv") as f:
        rerun = {r["provider"]: r["call_ms"] for r in csv.DictReader(f)}
    assert {r["provider"]: r["call_ms"] for r in rows if r["op"] == "reduce_sum"} == rerun
    meta = json.loads((tmp_path / "all" / "results.json").read_text())["meta"]
    assert [p["argv"][-1] for p in meta["parts"]] == [str(p) for p in parts]
    summary = (tmp_path / "all" / "summary.md").read_text()
    assert "| relu | bwd | 16x64 |" in summary and "| square | fwd | 16x64 |" in summary


def test_isolate_runs_each_provider_alone_and_joins_them_with_their_ratios(tmp_path):
    bench_ops = load("bench_ops")
    status = bench_ops.main(
        [
            "--device",
            "cpu",
            "--quick",
            "--ops",
            "relu",
            "--directions",
            "fwd",
            "--isolate",
            "--providers",
            "fused,eager",
            "--shapes",
            "16x64",
            "--out",
            str(tmp_path),
        ]
    )
    assert status == 0
    with open(tmp_path / "results.csv") as f:
        rows = {r["provider"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"fused", "eager"} and all(r["check"] == "ok" for r in rows.values())
    # the ratio between two processes' rows, worked out when they were joined
    fused, eager = (float(rows[p]["call_ms"]) for p in ("fused", "eager"))
    assert float(rows["fused"]["speedup_vs_eager"]) == pytest.approx(eager / fused)
    meta = json.loads((tmp_path / "results.json").read_text())["meta"]
    assert [p["argv"][-3] for p in meta["parts"]] == ["fused", "eager"]  # --providers X --out D


def test_isolate_keeps_each_providers_run_where_asked_so_a_cut_run_still_joins(tmp_path, monkeypatch):
    bench_ops, combine = load("bench_ops"), load("combine")
    runs = tmp_path / "runs"
    status = bench_ops.main(
        [
            "--device",
            "cpu",
            "--quick",
            "--ops",
            "square",
            "--directions",
            "fwd",
            "--isolate",
            "--providers",
            "fused,eager",
            "--shapes",
            "16x64",
            "--out",
            str(tmp_path / "joined"),
            f"--provider-runs={runs}",
        ]
    )
    assert status == 0
    assert sorted(p.name for p in runs.iterdir()) == ["eager", "fused"]
    # each run holds its own provider's rows only, and was not handed the
    # option itself
    for provider in ("fused", "eager"):
        with open(runs / provider / "results.csv") as f:
            assert [r["provider"] for r in csv.DictReader(f)] == [provider]
        argv = json.loads((runs / provider / "results.json").read_text())["meta"]["argv"]
        assert not any(a.startswith("--provider-runs") for a in argv) and "--isolate" not in argv
    # joined again by hand (as after a time limit), the same rows and ratios
    _, count = combine.combine(tmp_path / "again", [runs / "fused", runs / "eager"])
    assert count == 2
    with open(tmp_path / "joined" / "results.csv") as a, open(tmp_path / "again" / "results.csv") as b:
        assert list(csv.DictReader(a)) == list(csv.DictReader(b))
    # runs that die in the kept folders do not join the earlier runs' results
    died = types.SimpleNamespace(returncode=1)
    monkeypatch.setattr(bench_ops.subprocess, "run", lambda *a, **k: died)
    status = bench_ops.main(
        [
            "--device",
            "cpu",
            "--quick",
            "--ops",
            "square",
            "--directions",
            "fwd",
            "--isolate",
            "--providers",
            "fused,eager",
            "--shapes",
            "16x64",
            "--out",
            str(tmp_path / "cut"),
            "--provider-runs",
            str(runs),
        ]
    )
    assert status == 1 and not (tmp_path / "cut" / "results.csv").exists()


def synthetic_row(op, direction, shape, dtype, provider, gbs, call_us, peak=""):
    rows, cols = shape
    # kernel time from GB/s over a nominal byte count: only ratios matter here
    kernel_ms = 1e9 / (gbs * 1e9) * 1e3
    return dict(
        op=op,
        direction=direction,
        rows=rows,
        cols=cols,
        dtype=dtype,
        provider=provider,
        kernel_ms=kernel_ms,
        call_ms=call_us / 1e3,
        gbs=gbs,
        peak_extra_mib=peak,
        check="ok",
    )


def test_targets_name_every_row_that_misses_and_only_those(tmp_path):
    targets = load("targets")
    big, small, tiny = (16384, 4096), (1024, 1024), (8, 64)
    rows = [
        # forward, large: meets (2900, faster than eager) ...
        synthetic_row("relu", "fwd", big, "bf16", "fused", 2900, 10),
        synthetic_row("relu", "fwd", big, "bf16", "eager", 2800, 11),
        # ... misses by bandwidth although no peer is faster
        synthetic_row("square", "fwd", big, "bf16", "fused", 2700, 10),
        synthetic_row("square", "fwd", big, "bf16", "eager", 2000, 11),
        # backward in bf16: 2600 GB/s but only 1.5x liger -> missed; a failing
        # peer check is not counted as a peer
        synthetic_row("layer_norm", "bwd", big, "bf16", "fused", 2600, 10),
        synthetic_row("layer_norm", "bwd", big, "bf16", "liger", 2600 / 1.5, 12),
        dict(synthetic_row("layer_norm", "bwd", big, "bf16", "compile", 9999, 1), check="BAD"),
        # 1M elements: kernel time ties within 1% (a near miss), call time wins
        synthetic_row("rms_norm", "bwd", small, "fp32", "fused", 1000, 10),
        synthetic_row("rms_norm", "bwd", small, "fp32", "eager", 1010, 12),
        # memory: fused's fwdbwd peak over eager's
        synthetic_row("rms_norm", "fwdbwd", small, "fp32", "fused", 2000, 10, peak=20),
        synthetic_row("rms_norm", "fwdbwd", small, "fp32", "eager", 1000, 20, peak=16),
        # tiny: only "no peer wins" looks at it, and compile wins
        synthetic_row("relu", "fwd", tiny, "bf16", "fused", 1, 10),
        synthetic_row("relu", "fwd", tiny, "bf16", "compile", 2, 30),
    ]
    with open(tmp_path / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    verdicts = targets.evaluate(tmp_path)
    missed = {name: [line.split(" | ")[0:3] for line in failing] for name, (_, failing, _, _) in verdicts.items()}
    assert {name: checked for name, (checked, _, _, _) in verdicts.items()} == {
        "forward": 2,
        "backward": 1,
        "small (kernel)": 5,
        "small (call)": 5,
        "memory": 1,
        "no peer wins": 6,
    }
    assert missed["forward"] == [["| square", "fwd", "16384x4096"]]
    assert missed["backward"] == [["| layer_norm", "bwd", "16384x4096"]]
    assert missed["small (kernel)"] == [["| rms_norm", "bwd", "1024x1024"]]
    assert verdicts["small (kernel)"][2] == 1  # the 1% miss counts as near
    assert missed["small (call)"] == []
    assert missed["memory"] == [["| rms_norm", "fwdbwd", "1024x1024"]]
    assert missed["no peer wins"] == [["| rms_norm", "bwd", "1024x1024"], ["| relu", "fwd", "8x64"]]
    targets.main([str(tmp_path)])
    assert "## backward: missed" in (tmp_path / "targets.md").read_text()


def test_targets_set_each_bandwidth_miss_beside_the_copy_of_its_bytes(tmp_path):
    targets = load("targets")

    def row(op, direction, shape, provider, gbs, counted_bytes):
        return dict(synthetic_row(op, direction, shape, "bf16", provider, gbs, 10), kernel_ms=counted_bytes / gbs / 1e6)

    rows = [
        # 2^28 bytes: the copy reaches 1800 GB/s there, the target asks 2800
        row("square", "fwd", (16384, 4096), "fused", 2500, 2**28),
        row("square", "fwd", (16384, 4096), "eager", 2000, 2**28),
        # 2^32 bytes: the copy reaches 3000, so 2800 was within reach
        row("relu", "fwd", (65536, 16384), "fused", 2700, 2**32),
        row("relu", "fwd", (65536, 16384), "eager", 2750, 2**32),
        # a mask backward moves dy, the 1-bit mask and dx: 2^28 + 2^23 bytes
        # where 3 * 2^27 are counted; twice compile's 1600 GB/s is needed
        row("bias_scale_relu", "bwd", (16384, 4096), "fused", 2600, 3 * 2**27),
        row("bias_scale_relu", "bwd", (16384, 4096), "compile", 1600, 3 * 2**27),
    ]
    with open(tmp_path / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (tmp_path / "copy_by_size.csv").write_text(
        "bytes_moved,ms,gbs\n1048576,0.001,1000\n4294967296,1.4,3000\n1073741824,0.5,2000\n"
    )
    verdicts = targets.evaluate(tmp_path)
    cells = {
        line.split(" | ")[0]: [c.strip() for c in line.split("|")[-3:-1]]
        for name in ("forward", "backward")
        for line in verdicts[name][1]
    }
    assert cells["| square"] == ["2800", "1800"]  # 1000 + 0.8 * (2000 - 1000)
    assert cells["| relu"] == ["2800", "3000"]
    moved = 2**28 + 2**23
    copy = 1000 + (math.log2(moved) - 20) / 10 * 1000
    assert cells["| bias_scale_relu"] == ["3200", f"{copy * 3 * 2**27 / moved:.0f}"]
    assert [v[3] for v in (verdicts["forward"], verdicts["backward"])] == [1, 1]
    targets.main([str(tmp_path)])
    assert "| forward | 2 | 0 | 2 | 0 | 1 |" in (tmp_path / "targets.md").read_text()


def test_copy_by_size_times_copies_of_each_size_on_the_cpu(tmp_path):
    copy_by_size = load("copy_by_size")
    assert (
        copy_by_size.main(
            ["--device", "cpu", "--smallest", "1M", "--largest", "2M", "--rep-ms", "5", "--out", str(tmp_path)]
        )
        == 0
    )
    with open(tmp_path / "copy_by_size.csv") as f:
        got = list(csv.DictReader(f))
    # four sizes a doubling, each half a whole number of 16-byte vectors
    assert [int(r["bytes_moved"]) for r in got] == [int(2**20 * 2 ** (k / 4)) // 256 * 256 for k in range(5)]
    for r in got:
        assert float(r["gbs"]) == pytest.approx(int(r["bytes_moved"]) / float(r["ms"]) / 1e6)


def test_cpu_threads_times_every_op_on_one_thread_and_all(tmp_path):
    import subprocess

    bench_ops = load("bench_ops")
    out = subprocess.run(
        [sys.executable, str(BENCH / "cpu_threads.py"), "16x64"], capture_output=True, text=True, check=True
    ).stdout
    rows = [
        line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ") and not line.startswith("| op ")
    ]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [(op, d) for op, dirs in bench_ops.OPS.items() for d in dirs]
    for _, _, one, several, speedup in rows:
        assert float(one) > 0 and float(several) > 0
        assert float(speedup) == pytest.approx(float(one) / float(several), rel=0.02, abs=0.01)


def test_step_kernels_sorts_a_steps_kernels_by_kind():
    load("bench_train_step")
    step_kernels = load("step_kernels")
    kinds = {
        "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT": "gemm",
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(Params)": "gemm",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(Flash_fwd_params)": "attention",
        "void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(void const*, float*)": "attention",
        "void fo::(anonymous namespace)::swiglu_kernel<__nv_bfloat16, false>(fo::swiglu_params)": "fused_ops_py",
        "_rms_norm_forward_kernel": "triton",
        "triton_poi_fused_add_0": "triton",
        "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>>(int)": "torch",
        "Memset (Device)": "torch",
    }
    assert {name: step_kernels.kind(name) for name in kinds} == kinds
    shorts = [step_kernels.short(name) for name in kinds]
    assert shorts[4:] == [
        "swiglu_kernel",
        "_rms_norm_forward_kernel",
        "triton_poi_fused_add_0",
        "vectorized_elementwise_kernel",
        "Memset",
    ]


def test_bench_train_step_sorts_kernels_by_name_and_by_the_ops_they_ran_under():
    bench_train_step = load("bench_train_step")

    def under(*names):  # the op chain, innermost first, as the profiler links it
        op = None
        for name in reversed(names):
            op = types.SimpleNamespace(name=name, cpu_parent=op)
        return op

    cases = [
        ("void fo::(anonymous namespace)::swiglu_kernel<__nv_bfloat16, false>(fo::swiglu_args)", None, "fused_ops_py"),
        (
            "void cutlass::device_kernel<GemmUniversal<cutlass::gemm::GroupProblemShape<Shape<int, int, int>>>>",
            None,
            "experts_gemm",
        ),
        ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", under("aten::_grouped_mm", "aten::grouped_mm"), "experts_gemm"),
        ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", under("aten::mm", "aten::matmul", "aten::linear"), "other_gemm"),
        (
            "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits>(Flash_bwd_params)",  # noqa: E501
            under(
                "aten::_flash_attention_backward",
                "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0",
            ),
            "attention",
        ),
        ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>()", under("aten::topk"), "routing"),
        ("void at::native::index_elementwise_kernel<128, 4>()", under("aten::index"), "routing"),
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, SoftMaxForwardEpilogue>()",
            under("aten::_softmax", "aten::softmax"),
            "routing",
        ),
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, LogSoftMaxForwardEpilogue>()",
            under("aten::_log_softmax", "aten::log_softmax", "aten::cross_entropy_loss"),
            "other",
        ),
        (
            "void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<>()",
            under("aten::embedding_dense_backward", "autograd::engine::evaluate_function: EmbeddingBackward0"),
            "other",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>>(int)",
            None,
            "other",
        ),
    ]
    assert [bench_train_step.category(name, op) for name, op, _ in cases] == [c for _, _, c in cases]


def test_bench_train_step_runs_each_row_in_its_own_process_and_breaks_the_moe_step_down(tmp_path, monkeypatch):
    pytest.importorskip("transformers")  # the oldest-torch stage runs without it
    monkeypatch.syspath_prepend(str(BENCH))  # it imports bench_ops, as when run as a script
    bench_train_step = load("bench_train_step")
    bench_train_step.main(
        [
            "--model",
            "qwen3_moe",
            "--tiny",
            "--vocabs",
            "1000",
            "--providers",
            "eager,patch",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--no-decode",
            "--breakdown",
            "--out",
            str(tmp_path),
        ]
    )
    with open(tmp_path / "train_step_qwen3_moe.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["vocab"], r["provider"]) for r in rows] == [("1000", "eager"), ("1000", "patch")]
    eager, patch = rows
    assert "replaced" in patch["note"] and float(eager["ms"]) > 0 and float(patch["ms"]) > 0
    assert float(patch["first_loss"]) == pytest.approx(float(eager["first_loss"]), rel=1e-2)
    assert "Qwen3MoeForCausalLM" in (tmp_path / "train_step_qwen3_moe.md").read_text()
    with open(tmp_path / "train_step_qwen3_moe_breakdown.csv") as f:
        parts = {(r["provider"], r["category"]): (float(r["ms"]), float(r["share"])) for r in csv.DictReader(f)}
    for provider in ("eager", "patch"):
        assert sum(parts[provider, c][1] for c in bench_train_step.CATEGORY_NAMES) == pytest.approx(1, abs=0.01)
        assert parts[provider, "experts_gemm"][0] > 0 and parts[provider, "routing"][0] > 0
    assert parts["eager", "fused_ops_py"][0] == 0 < parts["patch", "fused_ops_py"][0]


def test_bench_cpu_times_every_op_and_direction_on_each_thread_count(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # it imports bench_ops, as when run as a script
    bench_cpu = load("bench_cpu")
    rows = bench_cpu.main(
        ["--shapes", "16x256", "--threads", "2,1", "--rounds", "1", "--budget-s", "0", "--out", str(tmp_path)]
    )
    expected = {
        (op, d, dt, t)
        for op in bench_cpu.OPS
        for d in bench_cpu.directions(op, ["fwd", "bwd"])
        for dt in ("fp32", "bf16")
        for t in (2, 1)
    }
    assert ("cross_entropy", "fwdbwd", "fp32", 1) in expected and ("reduce_sum", "bwd", "fp32", 1) not in expected
    assert {(r["op"], r["dir"], r["dtype"], r["threads"]) for r in rows} == expected
    with open(tmp_path / "cpu.csv") as f:
        written = list(csv.DictReader(f))
    assert len(written) == len(rows)
    assert all(float(r["eager_ms"]) > 0 and float(r["fused_ms"]) > 0 and float(r["speedup"]) > 0 for r in written)
    assert all((float(r["eager_pct_copy"]) >= bench_cpu.EXEMPT_PCT) == (r["exempt"] == "True") for r in written)
    assert f"{len(rows)} rows" in (tmp_path / "cpu.md").read_text()
    # the target: 1.0x on many threads, 0.9x on one, none for a row where torch is at the copy ceiling
    row = dict(speedup=0.95, threads=2, exempt=False)
    assert bench_cpu.misses_target(row) and not bench_cpu.misses_target(dict(row, threads=1))
    assert not bench_cpu.misses_target(dict(row, exempt=True))


def test_host_instructions_compares_each_mode_by_its_geometric_mean(tmp_path, capsys):
    host_instructions = load("host_instructions")
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    rows = {
        ("train", "relu", "fp32"): (1000, 1100),
        ("train", "square", "bf16"): (400, 100),
        ("infer", "relu", "fp32"): (50, 40),
    }
    for path, side in ((old, 0), (new, 1)):
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["mode", "op", "dtype", "instructions_a_call"])
            writer.writerows([*key, counts[side]] for key, counts in rows.items())
    means = host_instructions.compare(old, new)
    assert means.keys() == {"train", "infer"}  # fwdbwd has no cases
    assert means["train"] == pytest.approx(math.sqrt(1.1 * 0.25))
    assert means["infer"] == pytest.approx(0.8)
    assert "new/old 1.100" in capsys.readouterr().out
