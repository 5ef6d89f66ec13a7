"""FP8 against bf16 on real text: a byte-level Llama trained on the Python
standard library's .py files (this machine's, no download; every 20th file
held out for validation), three runs from the same initial weights and the
same batches, each in its own process:

  bf16          fused_ops_py.patch(model)
  fp8           fused_ops_py.patch(model, fp8=RECIPE)
  torchao_fp8   torchao.float8's convert_to_float8_training with RECIPE (the LM head kept in bf16), then
                torch.compile, as torchao's documentation runs it (eager gives the same casts, 2x slower)

8 layers, hidden 1024, AdamW, 1000 steps of 16 x 512 bytes, fp32 weights under bf16 autocast. Writes
fp8_convergence.csv (step, run, train loss, validation loss), .md (the final validation losses against the
targets: fp8 within 1% of bf16, and no more than 0.5% above torchao's) and .png (when matplotlib is there)
under --out (default bench/results/<gpu>/).

    python bench/fp8_convergence.py                      # about 3 minutes on an H200
    python bench/fp8_convergence.py --tiny --out /tmp/c  # smoke test: 2 layers, 20 steps, bf16 on any device
"""

import argparse
import csv
import json
import math
import subprocess
import sys
import sysconfig
from pathlib import Path

import torch

RUNS = ["bf16", "fp8", "torchao_fp8"]
FULL = dict(layers=8, hidden=1024, heads=16, kv_heads=4, intermediate=2816, batch=16, seq=512, steps=1000)
TINY = dict(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=176, batch=4, seq=64, steps=20)
EVAL_EVERY, EVAL_BATCHES, WARMUP_STEPS, LR = 100, 16, 100, 3e-4
ROW_PREFIX = "rows as json: "


def corpus():
    """(train bytes, validation bytes): the stdlib's .py files in name order, every 20th held out."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))
    parts = ([], [])
    for i, path in enumerate(files):
        parts[i % 20 == 0].append(path.read_bytes())
    return tuple(torch.frombuffer(bytearray(b"\n".join(p)), dtype=torch.uint8) for p in parts)


def batches(data, count, size, seed):
    """count batches of size windows of seq bytes, at offsets drawn from seed."""
    gen = torch.Generator().manual_seed(seed)
    batch, seq = size
    for _ in range(count):
        starts = torch.randint(0, len(data) - seq, (batch,), generator=gen)
        yield torch.stack([data[s : s + seq] for s in starts.tolist()]).long()


def make_model(shape, device):
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        max_position_embeddings=shape["seq"],
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(device)


def prepare(run, model, recipe):
    """(the model to train, a note of what was done to it)."""
    import fused_ops_py as fo

    if run == "torchao_fp8":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        config = Float8LinearConfig.from_recipe_name(recipe)
        convert_to_float8_training(model, config=config, module_filter_fn=lambda module, fqn: fqn != "lm_head")
        return torch.compile(model), f"torchao {recipe} + torch.compile"
    replaced = fo.patch(model, fp8=recipe if run == "fp8" else False)
    return model, f"patch: {replaced} replaced"


def train(run, shape, recipe, device):
    """The run's rows: (step, train loss, validation loss or None)."""
    train_data, val_data = corpus()
    model, note = prepare(run, make_model(shape, device), recipe)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    steps = shape["steps"]
    schedule = lambda step: min(1.0, (step + 1) / WARMUP_STEPS) * 0.5 * (1 + math.cos(math.pi * step / steps))  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    size = (shape["batch"], shape["seq"])

    def loss_of(tokens):
        tokens = tokens.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            return model(input_ids=tokens, labels=tokens).loss  # Hugging Face shifts the labels

    def validation():
        model.eval()
        with torch.no_grad():
            total = sum(loss_of(b).item() for b in batches(val_data, EVAL_BATCHES, size, seed=1))
        model.train()
        return total / EVAL_BATCHES

    rows = []
    for step, tokens in enumerate(batches(train_data, steps, size, seed=0)):
        loss = loss_of(tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        last = step == steps - 1
        rows.append(
            dict(
                step=step,
                run=run,
                train_loss=loss.item(),
                val_loss=validation() if last or (step + 1) % EVAL_EVERY == 0 else "",
            )
        )
    rows[0]["note"] = note
    return rows


def write_results(rows, out, shape, recipe, device):
    """fp8_convergence.csv, .md and (with matplotlib) .png under out."""
    from bench_ops import device_name

    fields = ["step", "run", "train_loss", "val_loss", "note"]
    with open(out / "fp8_convergence.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    final = {r["run"]: r["val_loss"] for r in rows if r["val_loss"] != "" and r["step"] == shape["steps"] - 1}
    lines = [
        f"# FP8 convergence ({recipe}), {device_name(device)}",
        "",
        f"{shape['layers']} layers, hidden {shape['hidden']}, {shape['steps']} steps of "
        f"{shape['batch']} x {shape['seq']} bytes of the Python standard library (every 20th file held out); "
        "AdamW, lr 3e-4, fp32 weights, bf16 autocast.",
        "",
        "| run | as | final validation loss | vs bf16 |",
        "|---|---|---:|---:|",
    ]
    notes = {r["run"]: r.get("note", "") for r in rows if r["step"] == 0}
    for run, loss in final.items():
        ratio = f"{loss / final['bf16']:.4f}" if "bf16" in final else ""
        lines.append(f"| {run} | {notes.get(run, '')} | {loss:.4f} | {ratio} |")
    if {"bf16", "fp8", "torchao_fp8"} <= final.keys():
        lines += [
            "",
            f"Targets: fp8 within 1% of bf16: {final['fp8'] <= 1.01 * final['bf16']}; "
            f"fp8 at most 0.5% above torchao: {final['fp8'] <= 1.005 * final['torchao_fp8']}.",
        ]
    (out / "fp8_convergence.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for run in final:
            points = [(r["step"], r["val_loss"]) for r in rows if r["run"] == run and r["val_loss"] != ""]
            ax.plot(*zip(*points), marker="o", label=run)
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss (nats a byte)")
        ax.legend()
        fig.savefig(out / "fp8_convergence.png", dpi=120, bbox_inches="tight")
    except ImportError:
        pass


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="tensorwise", choices=["tensorwise", "rowwise"])
    p.add_argument("--runs", type=lambda s: s.split(","), default=RUNS)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--out", type=Path)
    p.add_argument("--append", action="store_true", help="keep the other runs' rows of --out's fp8_convergence.csv")
    p.add_argument("--run", choices=RUNS, help=argparse.SUPPRESS)  # one run, in this process
    args = p.parse_args(argv)
    shape = TINY if args.tiny else FULL
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.run:
        print(ROW_PREFIX + json.dumps(train(args.run, shape, args.recipe, device)), flush=True)
        return 0
    from bench_ops import device_name, results_dir

    out = args.out or results_dir(device_name(device))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    if args.append and (out / "fp8_convergence.csv").exists():
        with open(out / "fp8_convergence.csv") as f:
            kept = [r for r in csv.DictReader(f) if r["run"] not in args.runs]
        for r in kept:
            r["step"] = int(r["step"])
            r["train_loss"] = float(r["train_loss"])
            r["val_loss"] = float(r["val_loss"]) if r["val_loss"] else ""
        rows += kept
    for run in args.runs:
        if run != "bf16" and device.type != "cuda":
            print(f"{run}: skipped, needs a GPU of compute capability 8.9 or later", flush=True)
            continue
        argv_run = [sys.executable, __file__, "--run", run, "--recipe", args.recipe] + (["--tiny"] if args.tiny else [])
        done = subprocess.run(argv_run, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith(ROW_PREFIX)]
        if done.returncode or not lines:
            print(f"{run}: error: {done.stderr.strip().splitlines()[-1:]}", flush=True)
            continue
        rows += json.loads(lines[-1].removeprefix(ROW_PREFIX))
        final = [r for r in rows if r["run"] == run][-1]
        print(f"{run}: final train loss {final['train_loss']:.4f}, validation loss {final['val_loss']:.4f}", flush=True)
        write_results(rows, out, shape, args.recipe, device)  # after each run: a later one may not finish
    if not rows:
        print("no run finished; nothing written")
        return 1
    write_results(rows, out, shape, args.recipe, device)
    print(f"wrote {out}/fp8_convergence.csv, .md" + (", .png" if (out / "fp8_convergence.png").exists() else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
