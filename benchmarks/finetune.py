"""Short fine-tunes, eager against updraft from the same seed: the loss curves and the final
accuracy (docs/training.md; tests/python/test_training.py runs the same tasks in its slow lane).

    python benchmarks/finetune.py                       # both tasks, 300 AdamW steps, chart
    python benchmarks/finetune.py --tasks bert --steps 500 --chart curves.png

Two synthetic tasks the script generates (nothing is downloaded):
- bert: a 2-layer BERT (hidden 64) classifies 16-token sequences by the token at position 3
  (mod 4), which the [CLS] position can only learn through attention.
- convnet: a small ConvNet (conv + train-mode batch norm + residual block) finds which quadrant
  of a noisy 16x16 image holds a bright square.
Each trains with AdamW (lr 1e-3, batch 32) on a fixed training set, then measures accuracy on a
held-out set in eval mode. updraft runs with CompilerConfig(training="engine"), so the engine
runs every graph it can, whatever the timing. Prints a table, draws the curves (PNG).
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent


def _bert_task(seed: int):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                     vocab_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, num_labels=4)
    model = BertForSequenceClassification(cfg)

    def data(n: int):
        ids = torch.randint(4, 64, (n, 16))
        return ids, ids[:, 3] % 4

    def loss_fn(m, x, y):
        return m(input_ids=x, labels=y).loss

    def logits_fn(m, x):
        return m(input_ids=x).logits

    return model, data, loss_fn, logits_fn


class ConvNet(torch.nn.Module):
    """Conv + train-mode batch norm + ReLU, max pool, a residual block, global pool, linear
    (also the ConvNet of tests/python/test_training.py)."""

    def __init__(self, in_channels: int = 1, classes: int = 4) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(in_channels, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
                                        torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.block = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16),
                                         torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, padding=1, bias=False),
                                         torch.nn.BatchNorm2d(16))
        self.head = torch.nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = F.relu(x + self.block(x))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def _convnet_task(seed: int):
    torch.manual_seed(seed)
    model = ConvNet()

    def data(n: int):
        y = torch.randint(0, 4, (n,))
        x = 0.5 * torch.randn(n, 1, 16, 16)
        for i in range(n):
            r, c = divmod(int(y[i]), 2)
            x[i, 0, 8 * r + 2:8 * r + 6, 8 * c + 2:8 * c + 6] += 2.0
        return x, y

    def loss_fn(m, x, y):
        return F.cross_entropy(m(x), y)

    return model, data, loss_fn, lambda m, x: m(x)


TASKS = {"bert": _bert_task, "convnet": _convnet_task}


def finetune(task: str, backend: str, steps: int = 300, seed: int = 0, batch: int = 32) -> dict:
    """Trains task `task` from seed `seed` with `backend` ("eager" or "updraft"); returns the loss
    per step, the held-out accuracy and the seconds spent."""
    from updraft import CompilerConfig, get_backend

    model, data, loss_fn, logits_fn = TASKS[task](seed)
    torch.manual_seed(seed + 1)
    train_x, train_y = data(512)
    test_x, test_y = data(256)
    model.train()
    run = model if backend == "eager" else torch.compile(
        model, backend=get_backend(CompilerConfig(training="engine")))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    t0 = time.perf_counter()
    for step in range(steps):
        i = (step * batch) % len(train_x)
        x, y = train_x[i:i + batch], train_y[i:i + batch]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(run, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        acc = (logits_fn(run, test_x).argmax(-1) == test_y).float().mean().item()
    return {"losses": losses, "accuracy": acc, "seconds": seconds}


def chart(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, (task, runs) in zip(axes[0], results.items()):
        for backend, r in runs.items():
            ax.plot(r["losses"], label=f"{backend} (held-out accuracy {100 * r['accuracy']:.1f}%)",
                    linewidth=1.0, linestyle="-" if backend == "eager" else "--")
        ax.set_title(f"{task}: training loss, eager vs updraft (same seed)")
        ax.set_xlabel("AdamW step")
        ax.set_ylabel("loss")
        ax.set_yscale("log")
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chart", type=Path, default=ROOT / "docs" / "finetune_curves.png")
    args = p.parse_args(argv)
    results: dict = {}
    print("| task | backend | first loss | last loss (mean of 20) | max abs loss diff vs eager | held-out accuracy | seconds |")
    print("|---|---|---|---|---|---|---|")
    for task in args.tasks:
        results[task] = {b: finetune(task, b, args.steps, args.seed) for b in ("eager", "updraft")}
        eager = results[task]["eager"]["losses"]
        for b, r in results[task].items():
            diff = max(abs(a - e) for a, e in zip(r["losses"], eager))
            tail = sum(r["losses"][-20:]) / 20
            print(f"| {task} | {b} | {r['losses'][0]:.4f} | {tail:.4f} | {diff:.2e} | "
                  f"{100 * r['accuracy']:.1f}% | {r['seconds']:.1f} |")
    chart(results, args.chart)
    print(f"chart: {args.chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
