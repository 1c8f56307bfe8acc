"""Cost of ViF against the text-only MAS: FLOPs (torch's FlopCounterMode) and wall time per episode.

The paper reports +8-13% latency and +4.8-11.9% FLOPs (Sec. 5). Here an agent turn under ViF runs a
probe pass (to classify the vision tokens) and the reallocated answering pass, plus f, so it costs about
twice the text-only turn; fusing the probe into the answering pass (curves from the previous agent or from
the shallow layers of the same pass) is what would bring it near the paper's overhead.

    python -m iclr26.vif.bench            # tiny VLM of the small scale, 64 episodes of 8 turns
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch
from torch.utils.flop_counter import FlopCounterMode

from iclr26.vif.config import RunConfig, config_for
from iclr26.vif.mas import Episodes, run_mas
from iclr26.vif.tiny import TinyVLM


def measure(cfg: RunConfig, episodes: int = 64, seed: int = 0) -> dict:
    """FLOPs and wall seconds per episode for the text-only MAS and ViF (same untrained model and episodes)."""
    torch.manual_seed(seed)
    model = TinyVLM(cfg.model, cfg.vif).eval()
    ec = replace(cfg.eval, episodes=episodes, batch=episodes)
    ep = Episodes.draw(seed, "natural", episodes, ec.turns, cfg.data, False)
    out = {}
    for name, use_vif in (("text", False), ("vif", True)):
        with FlopCounterMode(display=False) as fc:
            run_mas(model, ep, cfg.vif, ec, cfg.data, use_vif, False, seed)
        start = time.perf_counter()
        run_mas(model, ep, cfg.vif, ec, cfg.data, use_vif, False, seed)
        out[name] = {
            "flops_per_episode": fc.get_total_flops() / episodes,
            "seconds_per_episode": (time.perf_counter() - start) / episodes,
        }
    out["flops_ratio"] = out["vif"]["flops_per_episode"] / out["text"]["flops_per_episode"]
    out["time_ratio"] = out["vif"]["seconds_per_episode"] / out["text"]["seconds_per_episode"]
    return out


if __name__ == "__main__":
    import json

    torch.set_num_threads(1)
    print(json.dumps(measure(config_for("small")), indent=2))
