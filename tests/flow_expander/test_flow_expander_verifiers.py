"""Verifiers: hard/soft ellipse, weak disc verifier (Omega_v ⊇ Omega), composition, conformer checks."""

import numpy as np
import pytest
import torch

from iclr26.flow_expander.tasks import make_t1, make_t2
from iclr26.flow_expander.verifiers import (
    CallableVerifier,
    ConstantVerifier,
    DiscRejectionVerifier,
    EllipseVerifier,
    HalfPlaneVerifier,
    IntersectionVerifier,
    MinDistanceVerifier,
)


def test_ellipse_hard_soft_and_gradient_points_inward():
    v = EllipseVerifier(3.0, 1.5, kappa=15.0)
    x = torch.tensor([[0.0, 0.0], [2.9, 0.0], [3.1, 0.0], [0.0, 1.6]])
    assert v.hard(x).tolist() == [True, True, False, False]
    s = v.soft(x)
    assert (s > 0).all() and (s <= 1).all() and s[0] > 0.99 and s[2] < 0.5
    g = v.grad_log_soft(torch.tensor([[3.2, 0.0], [0.0, -1.7]]))
    assert g[0, 0] < 0 and g[1, 1] > 0


def test_weak_verifier_contains_true_valid_set():
    """Def. 2: v(x) = 0 => x invalid, on random points (T2: disc rejection vs x1 > -1.2)."""
    task = make_t2(2000, 0)
    x = torch.rand(20000, 2) * 8 - 4
    weak, truth = task.verifier.hard(x), task.truth.hard(x)
    assert not (truth & ~weak).any()
    assert (weak & ~truth).any()  # strictly weak: accepts some invalid points
    assert isinstance(task.truth, HalfPlaneVerifier)
    t1 = make_t1(3000, 0)
    assert t1.verifier.hard(t1.data).all()  # T1 data lies in Omega


def test_intersection_is_pointwise_and():
    a, b = EllipseVerifier(), DiscRejectionVerifier((0.0, 0.0), 0.5)
    both = IntersectionVerifier([a, b])
    x = torch.rand(500, 2) * 8 - 4
    assert torch.equal(both.hard(x), a.hard(x) & b.hard(x))
    assert torch.allclose(both.log_soft(x), a.log_soft(x) + b.log_soft(x))
    with pytest.raises(ValueError):
        IntersectionVerifier([])


def test_constant_and_callable_verifiers():
    x = torch.randn(5, 2)
    assert torch.equal(ConstantVerifier().grad_log_soft(x), torch.zeros(5, 2))
    cv = CallableVerifier(lambda z: z[:, 0] > 0)
    assert cv.hard(x).dtype == torch.bool
    with pytest.raises(ValueError):
        cv.soft(x)
    with pytest.raises(ValueError):
        CallableVerifier(lambda z: torch.ones(3)).hard(x)


def test_min_distance_verifier():
    v = MinDistanceVerifier(3, threshold=0.9)
    ok = torch.tensor([[0, 0, 0, 1.0, 0, 0, 0, 1.0, 0]])
    bad = torch.tensor([[0, 0, 0, 0.5, 0, 0, 0, 1.0, 0]])
    assert v.hard(ok).item() and not v.hard(bad).item()
    d = v.distances(ok)
    assert torch.allclose(d.sort().values, torch.tensor([[1.0, 1.0, 2**0.5]]), atol=1e-5)
    expected = torch.sigmoid(d - 0.9).mean()
    assert torch.allclose(v.soft(ok), expected)
    g = v.grad_log_soft(bad)
    assert g[0, 3] > 0  # pushes the too-close atom away


def test_rdkit_missing_gives_install_hint(monkeypatch):
    """Without RDKit (simulated by hiding the module) the verifier says how to install it."""
    import sys

    from iclr26.flow_expander.conformer import RDKitConformerVerifier

    monkeypatch.setitem(sys.modules, "rdkit", None)
    with pytest.raises(ImportError, match=r"iclr26\[chem\]"):
        RDKitConformerVerifier("OCCO")


def test_rdkit_conformer_verifier():
    pytest.importorskip("rdkit")
    from iclr26.flow_expander.conformer import RDKitConformerVerifier, generate_conformers

    pos = generate_conformers("OCCO", 20, 0, source="etkdg", dihedral_range=None)
    ver = RDKitConformerVerifier("OCCO")
    x = torch.tensor(pos.reshape(len(pos), -1), dtype=torch.float32)
    assert ver.hard(x).float().mean() > 0.9
    squashed = x.clone().reshape(len(pos), 10, 3)
    squashed[:, 1] = squashed[:, 0] + 0.3  # two atoms 0.5 A apart: fails min distance
    assert not ver.hard(squashed.reshape(len(pos), -1)).any()
    stretched = x.clone().reshape(len(pos), 10, 3) * 1.6  # bonds broken: topology check fails
    assert ver.hard(stretched.reshape(len(pos), -1)).float().mean() < 0.1


def test_conformer_helpers_without_rdkit():
    from iclr26.flow_expander.conformer import basin_coverage, dihedral, kabsch_align, sorted_distance_fingerprint

    rng = np.random.default_rng(0)
    ref = rng.normal(size=(5, 3))
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.linalg.det(q))
    rotated = np.stack([ref @ q + 1.0, ref @ q.T - 2.0])
    aligned = kabsch_align(rotated, ref)
    assert np.allclose(aligned, ref - ref.mean(0), atol=1e-6)
    fp = sorted_distance_fingerprint(rotated)
    assert np.allclose(fp[0], fp[1])
    pos = np.array([[[1.0, 0, 0], [0, 0, 0], [0, 1.0, 0], [0, 1.0, 1.0]]])
    assert abs(abs(dihedral(pos, (0, 1, 2, 3))[0]) - 90.0) < 1e-6
    assert basin_coverage(np.array([60.0] * 50 + [180.0] * 50)) == 2


def test_dihedral_and_kabsch_match_rdkit_and_scipy_references():
    """The vectorised dihedral equals RDKit's GetDihedralDeg; Kabsch alignment is a proper rotation."""
    pytest.importorskip("rdkit")
    from rdkit.Chem import rdMolTransforms

    from iclr26.flow_expander.conformer import dihedral, generate_conformers, kabsch_align, rdkit_seed

    pos = generate_conformers("OCCO", 12, seed=3, source="etkdg", dihedral_range=None)
    from rdkit import Chem
    from rdkit.Geometry import Point3D

    mol = Chem.AddHs(Chem.MolFromSmiles("OCCO"))
    ours = dihedral(pos, (0, 1, 2, 3))
    for p, phi in zip(pos, ours):
        conf = Chem.Conformer(10)
        for i, (a, b, c) in enumerate(p):
            conf.SetAtomPosition(i, Point3D(float(a), float(b), float(c)))
        mol.RemoveAllConformers()
        cid = mol.AddConformer(conf, assignId=True)
        ref = rdMolTransforms.GetDihedralDeg(mol.GetConformer(cid), 0, 1, 2, 3)
        assert abs((phi - ref + 180) % 360 - 180) < 1e-6
    # Kabsch keeps every interatomic distance (a rotation) and does not reflect (dihedral signs kept)
    rng = np.random.default_rng(0)
    mirrored = pos * np.array([-1.0, 1.0, 1.0]) + rng.normal(size=3)
    aligned = kabsch_align(mirrored, pos[0])
    assert np.allclose(dihedral(aligned, (0, 1, 2, 3)), -ours, atol=1e-6)
    assert rdkit_seed(0) != 0
    with pytest.raises(ValueError):
        rdkit_seed(-1)


def test_conformer_generation_samples_the_torsion_range():
    """Seed 0 used to give identical conformers (RDKit randomSeed=0); now both sources vary the dihedral."""
    pytest.importorskip("rdkit")
    from iclr26.flow_expander.conformer import dihedral, generate_conformers

    tor = generate_conformers("OCCO", 40, seed=0, source="torsion", dihedral_range=(30.0, 90.0))
    phi = dihedral(tor, (0, 1, 2, 3))
    assert tor.shape == (40, 10, 3) and phi.min() >= 29.9 and phi.max() <= 90.1 and phi.std() > 10.0
    free = generate_conformers("OCCO", 60, seed=0, source="etkdg", dihedral_range=None)
    assert np.ptp(dihedral(free, (0, 1, 2, 3))) > 60.0  # more than one basin
    assert np.allclose(tor.mean(1), 0.0, atol=1e-9)  # centred


def test_rdkit_verifier_rejects_a_permuted_bond_graph():
    """Swapping an H of C1 with an H of C2 gives the same molecule (sanitises, same SMILES) but the wrong
    atom-to-atom bond graph: only the bond-graph check catches it."""
    pytest.importorskip("rdkit")
    from iclr26.flow_expander.conformer import RDKitConformerVerifier, generate_conformers

    pos = generate_conformers("OCCO", 10, 0, source="etkdg", dihedral_range=None)
    ver = RDKitConformerVerifier("OCCO")
    h_on_c1 = [j for i, j in sorted(ver.ref_bonds) if i == 1 and ver.elements[j] == 1][0]
    h_on_c2 = [j for i, j in sorted(ver.ref_bonds) if i == 2 and ver.elements[j] == 1][0]
    swapped = pos.copy()
    swapped[:, [h_on_c1, h_on_c2]] = pos[:, [h_on_c2, h_on_c1]]
    x = torch.tensor(pos.reshape(len(pos), -1), dtype=torch.float32)
    xs = torch.tensor(swapped.reshape(len(pos), -1), dtype=torch.float32)
    assert ver.hard(x).all()
    assert ver.weak.hard(xs).all() and not ver.hard(xs).any()
