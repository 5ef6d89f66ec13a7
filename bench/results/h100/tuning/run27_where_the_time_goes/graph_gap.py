"""Graph replays as bench_ops times them (flush, event, replay, event):
every GPU activity with its start relative to the flush's end.
graph_gap_a.txt and _b.txt came from it before the three timings and the
"continue" after them (graph_gap_c.txt) were added."""
import sys
import torch
from torch.profiler import ProfilerActivity, profile
sys.argv, argv = sys.argv[:1], sys.argv[1:]
import bench_ops as b
op, direction, shape, *providers = argv
m, n = (int(v) for v in shape.split("x"))
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
for provider in providers:
    inputs, dy = b.make_inputs(op, m, n, torch.bfloat16, "cuda")
    fn = b.provider_fn(provider, op, False)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call = b.make_call(fn, inputs, dy, direction)
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        call()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    from triton.testing import do_bench
    if "PLAIN_FIRST" in __import__("os").environ:
        print("plain call", do_bench(call, warmup=25, rep=100, return_mode="median") * 1e3)
    starts, ends = [torch.cuda.Event(enable_timing=True) for _ in range(30)], [torch.cuda.Event(enable_timing=True) for _ in range(30)]
    for i in range(30):
        flush.zero_(); starts[i].record(); graph.replay(); ends[i].record()
    torch.cuda.synchronize()
    ev = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))[15]
    from triton.testing import do_bench
    db = do_bench(graph.replay, warmup=25, rep=100, return_mode="median") * 1e3
    class A: warmup_ms = 25; rep_ms = 100
    gb = b.graph_bench(fn, inputs, dy, direction, A)[0] * 1e3
    print(f"== {provider}: my loop {ev:.2f} us, do_bench(replay) {db:.2f} us, bench_ops.graph_bench {gb:.2f} us")
    continue
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        for _ in range(5):
            flush.zero_(); graph.replay()
        torch.cuda.synchronize()
    acts = sorted((e.time_range.start, e.time_range.end, e.name) for e in trace.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    print(f"== {provider} {shape}: event median {ev:.2f} us")
    last_end = None
    for s, e, name in acts[-4:]:
        gap = "" if last_end is None else f"gap {s - last_end:7.2f}"
        print(f"  {gap:12s} dur {e - s:8.2f}  {name[:90]}")
        last_end = e
