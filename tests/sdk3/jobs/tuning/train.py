"""A trial's script for the v3 tuner test: gradient steps on (w - 3)^2 at the tuned `--lr`.

It resumes from /opt/ml/checkpoints/state.pt, prints `epoch E loss=L` each epoch (the tuning
objective), checkpoints from rank 0 and writes /opt/ml/model/model.json. It prints which rank of
how many processes it is (torchrun's variables, else rank 0 of 1) and on which host.
"""

import argparse
import json
import os

CHECKPOINT = "/opt/ml/checkpoints/state.json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--epochs", type=int, default=3)
    args, _ = parser.parse_known_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    print(f"rank {rank}/{world} host {os.environ['SM_CURRENT_HOST']} lr {args.lr}", flush=True)
    w = 0.0
    for epoch in range(args.epochs):
        w -= args.lr * 2 * (w - 3)
        print(f"epoch {epoch} loss={(w - 3) ** 2:.6f}", flush=True)
        if rank == 0:
            with open(CHECKPOINT, "w") as f:
                json.dump({"epoch": epoch, "w": w}, f)
    if rank == 0:
        with open("/opt/ml/model/model.json", "w") as f:
            json.dump({"w": w}, f)


if __name__ == "__main__":
    main()
