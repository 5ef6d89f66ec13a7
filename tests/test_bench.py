"""The benchmark tools on the CPU, small: every provider's output is checked
against eager inside bench_ops (a BAD check makes it return 1), and the
files it writes hold what its summary says. No timing is asserted."""

import csv
import importlib.util
import sys
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
    status = bench_ops.main([
        "--device", "cpu", "--quick", "--ops", "layer_norm,bias_scale_relu,reduce_sum",
        "--providers", "fused,eager", "--shapes", "16x64", "--out", str(tmp_path),
    ])
    assert status == 0
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    # every direction bench_ops.OPS lists for each op, for both providers
    expected = {(op, d, p) for p in ("fused", "eager")
                for op, dirs in bench_ops.OPS.items()
                if op in ("layer_norm", "bias_scale_relu", "reduce_sum") for d in dirs}
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
    monkeypatch.setattr(sys, "argv", ["bench_overhead.py", "--device", "cpu", "--calls", "3",
                                      "--batches", "2", "--out", str(tmp_path)])
    bench_overhead.main()
    with open(tmp_path / "overhead.csv") as f:
        rows = list(csv.DictReader(f))
    ops = set(bench_overhead.ops("cpu"))
    assert {(r["op"], r["mode"]) for r in rows} == {
        (op, mode) for op in ops for mode in ("infer", "train", "fwdbwd")}
    for r in rows:
        assert float(r["fused_us"]) > 0 and float(r["torch_us"]) > 0
        assert float(r["fused_over_torch"]) == pytest.approx(
            float(r["fused_us"]) / float(r["torch_us"]), rel=0.02, abs=0.01)


def test_plot_draws_one_png_per_op_and_direction(tmp_path):
    pytest.importorskip("matplotlib")
    plot = load("plot")
    rows = [
        dict(op="relu", direction="fwd", rows=4096, cols=cols, dtype="bf16", provider=p,
             gbs=gbs, fraction_of_ceiling=gbs / 4000, check="ok")
        for cols in (1024, 4096) for p, gbs in (("fused", 3000.0), ("eager", 2000.0))
    ] + [dict(op="relu", direction="fwd", rows=8, cols=64, dtype="bf16", provider="fused",
              gbs=1.0, fraction_of_ceiling=0.0, check="ok")]  # tiny: left out
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
