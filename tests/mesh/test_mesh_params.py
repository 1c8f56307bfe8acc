"""Table 5 of the paper, exactly, on the meta device; the closed form equals the built model."""

import pytest
import torch

from iclr26.mesh.model import MeshConfig, RecursiveNeoX, parameter_groups
from iclr26.mesh.params import count_built_parameters, count_parameters, layer_parameters, router_parameters
from iclr26.mesh.pythia import pythia_config

PYTHIA_14B = dict(vocab_size=52352, d_model=2048, n_heads=16, d_ff=8192)


def test_table5_pythia_1_4b_exact_on_meta_device():
    assert layer_parameters(2048, 8192) == 50_358_272
    vanilla = MeshConfig(layout="24", scheme="base", **PYTHIA_14B)
    rec = MeshConfig(layout="4+8R2+4", scheme="base", **PYTHIA_14B)
    mesh = MeshConfig(layout="4+8R2+4", scheme="mesh", **PYTHIA_14B)
    built_v, built_r, built_m = (count_built_parameters(c) for c in (vanilla, rec, mesh))
    assert built_v["non_embedding"] == count_parameters(vanilla)["non_embedding"] == 1_208_602_624
    assert built_r["non_embedding"] == count_parameters(rec)["non_embedding"] == 805_736_448
    assert built_m["routers"] == router_parameters(2048, 5, 2) == 61_470
    assert built_m["non_embedding"] == 805_736_448 + 61_470
    # Table 5's totals include untied in/out embeddings of the padded vocabulary 52,352
    assert built_v["total"] - built_v["non_embedding"] == 2 * 52_352 * 2048
    # -33.3% non-embedding parameters for the recursive model
    assert abs(built_r["non_embedding"] / built_v["non_embedding"] - 2 / 3) < 1e-5


def test_meta_device_allocates_nothing():
    with torch.device("meta"):
        m = RecursiveNeoX(MeshConfig(**PYTHIA_14B))
    assert all(p.device.type == "meta" for p in m.parameters())


@pytest.mark.parametrize(
    "kw",
    [
        dict(layout="2+1R3+1", scheme="mesh"),
        dict(layout="1+2R2+0", scheme="mesh", buffer_size=3),
        dict(layout="1+2R2+1", scheme="anchor"),
        dict(layout="1+1R3+1", scheme="mesh", share_core=False),
        dict(layout="4", scheme="base", tie_embeddings=True),
        dict(layout="0+3R2+0", scheme="residual", d_ff=40),
    ],
)
def test_formula_equals_built_model(kw):
    cfg = MeshConfig(vocab_size=37, d_model=16, n_heads=2, max_seq_len=32, **kw)
    formula = count_parameters(cfg)
    built = parameter_groups(RecursiveNeoX(cfg))
    assert formula["non_embedding"] == built["non_embedding"]
    assert formula["routers"] == built["routers"]
    assert formula["total"] == built["total"] == sum(p.numel() for p in RecursiveNeoX(cfg).parameters())


def test_pythia_sizes_and_paper_layouts():
    cfg = pythia_config("1.4b")
    assert cfg.layout == "4+8R2+4" and cfg.d_model == 2048 and cfg.n_heads == 16 and cfg.scheme == "mesh"
    assert count_parameters(pythia_config("1.4b", layout="24", scheme="base"))["non_embedding"] == 1_208_602_624
    # Pythia-410M 4+8R2+4 and 160M 2+4R2+2 keep the unrolled depth of the vanilla model
    assert pythia_config("410m").parsed_layout.depth == 24
    assert pythia_config("pythia-160m").layout == "2+4R2+2"
    with pytest.raises(ValueError):
        pythia_config("1.4b", layout="4+8R3+4")  # depth 32 != 24
