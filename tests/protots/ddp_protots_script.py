"""Run by test_protots_ddp.py: ProtoTS stage 1 on a tiny generated CSV, plainly and under torchrun (2 ranks)."""

import json
import os
import sys

import numpy as np
import pandas as pd
import torch

from iclr26.protots.config import DataConfig, ProtoTSConfig, StageConfig
from iclr26.protots.data import load_local_series, split_windows
from iclr26.protots.model import ProtoTS
from iclr26.protots.training import fit_root

if __name__ == "__main__":
    torch.set_num_threads(1)
    out, csv = sys.argv[1], f"{sys.argv[2]}.{os.environ.get('RANK', '0')}.csv"  # one file per rank: no write race
    n = 24 * 40
    rng = np.random.default_rng(0)
    date = pd.date_range("2013-01-01", periods=n, freq="h")
    load = 1000 + 100 * np.sin(2 * np.pi * np.arange(n) / 24) + rng.normal(0, 10, n)
    pd.DataFrame(
        {
            "date": date.strftime("%Y-%m-%d %H:%M:%S"),
            "Grid load forecast": load,
            "Wind power forecast": rng.normal(300, 30, n),
            "OT": 0.03 * load,
        }
    ).to_csv(csv, index=False)
    dc = DataConfig(csv=csv, L=24, H=24, train_stride=4)
    sp = split_windows(load_local_series(dc), dc)
    sp.train = sp.train.subset(slice(0, 128))
    m = ProtoTS(sp.series.cards, len(sp.series.con_names), 24, 24, ProtoTSConfig(d=8, d_bottle=2, n_roots=3), seed=0)
    info = fit_root(m, sp.train, sp.val, StageConfig(epochs=3, batch_size=32, lr=3e-3), seed=0)
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"val": info["best_val_mae"], "p": m.roots[0].p.tolist()}, f)
    if dist.is_initialized():
        dist.destroy_process_group()
