# SPDX-License-Identifier: MIT
"""Train jitops.LLTM on a small synthetic sequence task, and time it against the pure-torch cell.

    python examples/lltm.py [--device cuda|cpu] [--steps 300]

The task: read a sequence of random vectors and report, at the end, the running mean of their
first two features. An LLTM cell unrolled over the sequence feeds a linear readout; Adam
minimises the squared error. The same model then trains with the pure-torch lltm_ref cell and
the step times are compared.
"""

import argparse
import time

import torch
from timing import noise_note, ratio, train_and_time

import jitops
from jitops.ops.lltm import lltm_ref


class SequenceModel(torch.nn.Module):
    def __init__(self, features: int, state: int, cell_fn) -> None:
        super().__init__()
        self.cell = jitops.LLTM(features, state)
        self.readout = torch.nn.Linear(state, 2)
        self.cell_fn = cell_fn  # jitops.lltm or lltm_ref, with the cell's parameters

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:  # [T, B, I] -> [B, 2]
        batch = sequence.shape[1]
        h = sequence.new_zeros(batch, self.cell.state_size)
        c = sequence.new_zeros(batch, self.cell.state_size)
        for x in sequence:
            h, c = self.cell_fn(x, self.cell.weights, self.cell.bias, h, c)
        return self.readout(h)


def train(cell_fn, device: str, steps: int, batch: int, length: int, features: int, state: int, log_every: int):
    torch.manual_seed(0)
    model = SequenceModel(features, state, cell_fn).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    def batch_loss():
        sequence = torch.randn(length, batch, features, device=device)
        target = sequence[:, :, :2].mean(dim=0)
        return (model(sequence) - target).square().mean()

    return train_and_time(batch_loss, optimizer, device, steps, log_every)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=8, help="sequence length")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--state", type=int, default=128)
    args = parser.parse_args()
    sizes = (args.batch, args.length, args.features, args.state)

    started = time.perf_counter()
    jitops.LLTM(1, 1).to(args.device)(torch.zeros(1, 1, device=args.device), (torch.zeros(1, 1, device=args.device),) * 2)
    print(f"lltm ready in {time.perf_counter() - started:.2f}s (build or cache load)")

    print(f"jitops.lltm, batch {args.batch}, sequences of {args.length}, state {args.state}:")
    jitops_ms, jitops_loss = train(jitops.lltm, args.device, args.steps, *sizes, log_every=max(1, args.steps // 6))
    print("lltm_ref (pure torch), same steps:")
    ref_ms, ref_loss = train(lltm_ref, args.device, args.steps, *sizes, log_every=0)
    print(f"final loss: jitops {jitops_loss:.5f}, pure torch {ref_loss:.5f}")
    print(f"step time: jitops {jitops_ms:.3f} ms, pure torch {ref_ms:.3f} ms ({ratio(ref_ms, jitops_ms)})")
    if noise_note():
        print(noise_note())


if __name__ == "__main__":
    main()
