"""Conformer task (T3, a mini QM9 setting) and the paper-scale path: positions-only flow matching
on molecular conformers with a weak min-distance verifier and RDKit validity.

RDKit is optional: ``pip install 'iclr26[chem]'`` (or ``pip install rdkit``). Everything that needs
it calls :func:`require_rdkit`, which raises a clear ImportError when it is missing.

Validity (paper App. G.4), all of:
  1. every interatomic distance >= ``threshold`` (0.9 A, the paper's appendix; main text: 0.975 A);
  2. the bond graph that ``rdDetermineBonds`` perceives from the coordinates equals the reference graph;
  3. bond orders perceived (``DetermineBondOrders``), ``SanitizeMol`` succeeds, no radical electrons or
     implicit H, and the heavy-atom SMILES round trip matches the reference.
The weak verifier folded in (1) makes Def. 2 hold by construction (v = 0 => invalid).
Diversity: conformer Vendi on sorted pairwise-distance fingerprints (RBF kernel, median bandwidth).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.core.experiment import ExperimentError, RunContext, mean_std
from iclr26.core.parallel import torch_threads
from iclr26.core.report import markdown_table

from .config import ConformerConfig
from .expander import flow_expansion, method_config
from .flow import VelocityMLP, pretrain_flow_matching, sample_ode
from .metrics import rbf_kernel_median, vendi_score
from .verifiers import MinDistanceVerifier, Verifier

RDKIT_HINT = "this needs RDKit, which is not installed: pip install 'iclr26[chem]' (or: pip install rdkit)"


def require_rdkit():
    """Import RDKit lazily; raise an ImportError that tells the user how to install it."""
    try:
        from rdkit import Chem, RDLogger
        from rdkit.Chem import AllChem, rdDetermineBonds
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(RDKIT_HINT) from exc
    RDLogger.DisableLog("rdApp.*")
    return Chem, AllChem, rdDetermineBonds


def pairwise_distances(pos: np.ndarray) -> np.ndarray:
    """(B, N, 3) -> (B, N (N - 1) / 2) upper-triangle distances."""
    pos = np.asarray(pos, dtype=float)
    n = pos.shape[1]
    iu = np.triu_indices(n, 1)
    d = np.linalg.norm(pos[:, :, None, :] - pos[:, None, :, :], axis=-1)
    return d[:, iu[0], iu[1]]


def sorted_distance_fingerprint(pos: np.ndarray) -> np.ndarray:
    """Conformer fingerprint: the sorted vector of all N (N - 1) / 2 interatomic distances."""
    return np.sort(pairwise_distances(pos), axis=1)


def conformer_vendi(pos: np.ndarray) -> float:
    """Conformer Vendi: Vendi score of an RBF (median bandwidth) kernel on sorted-distance fingerprints."""
    return vendi_score(rbf_kernel_median(sorted_distance_fingerprint(pos)))


def kabsch_align(pos: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Centre every conformer and rotate it onto ``ref`` (N, 3): the Kabsch rotation, computed by
    ``scipy.spatial.transform.Rotation.align_vectors`` (proper rotations only, no reflections)."""
    from scipy.spatial.transform import Rotation

    pos = np.asarray(pos, dtype=float)
    pos = pos - pos.mean(1, keepdims=True)
    ref = np.asarray(ref, dtype=float) - np.asarray(ref, dtype=float).mean(0)
    out = np.empty_like(pos)
    for i, p in enumerate(pos):
        rot, _ = Rotation.align_vectors(ref, p)  # argmin_R sum_j ||ref_j - R p_j||^2
        out[i] = rot.apply(p)
    return out


def dihedral(pos: np.ndarray, idx: tuple[int, int, int, int]) -> np.ndarray:
    """Dihedral angle (degrees, in (-180, 180]) of atoms ``idx`` for every conformer (B, N, 3).

    Vectorised; equal to RDKit's ``rdMolTransforms.GetDihedralDeg`` (tested)."""
    pos = np.asarray(pos, dtype=float)
    p0, p1, p2, p3 = (pos[:, i] for i in idx)
    b0, b1, b2 = p0 - p1, p2 - p1, p3 - p2
    b1n = b1 / np.linalg.norm(b1, axis=1, keepdims=True)
    v = b0 - (b0 * b1n).sum(1, keepdims=True) * b1n
    w = b2 - (b2 * b1n).sum(1, keepdims=True) * b1n
    x = (v * w).sum(1)
    y = (np.cross(b1n, v) * w).sum(1)
    return np.degrees(np.arctan2(y, x))


def basin_coverage(angles: np.ndarray, min_frac: float = 0.02) -> int:
    """Number of O-C-C-O basins (g+ (0, 120), anti |phi| >= 120, g- (-120, 0)) holding >= min_frac of samples."""
    a = np.asarray(angles)
    fr = [np.mean((a > 0) & (a < 120)), np.mean(np.abs(a) >= 120), np.mean((a < 0) & (a > -120))]
    return int(sum(f >= min_frac for f in fr))


class RDKitConformerVerifier(Verifier):
    """Validity of conformers of one molecule (``smiles``, explicit H, RDKit atom order).

    hard(x): min distance >= threshold AND perceived bond graph == reference AND sanitisation /
    SMILES round trip / no radicals. soft(x): the differentiable weak part (paper Eq. 55),
    mean_{i<j} sigmoid(slope (d_ij - threshold)).
    """

    def __init__(self, smiles: str, threshold: float = 0.9, slope: float = 1.0):
        chem, _, _ = require_rdkit()
        mol = chem.MolFromSmiles(smiles)
        if mol is None:
            raise ValueError(f"RDKit cannot parse SMILES {smiles!r}")
        self.mol = chem.AddHs(mol)
        self.n_atoms = self.mol.GetNumAtoms()
        self.elements = [a.GetAtomicNum() for a in self.mol.GetAtoms()]
        self.ref_bonds = {tuple(sorted((b.GetBeginAtomIdx(), b.GetEndAtomIdx()))) for b in self.mol.GetBonds()}
        self.ref_smiles = chem.MolToSmiles(chem.RemoveHs(self.mol))
        self.charge = chem.GetFormalCharge(self.mol)
        self.weak = MinDistanceVerifier(self.n_atoms, threshold, slope)

    def _valid_one(self, pos: np.ndarray) -> bool:
        chem, _, det = require_rdkit()
        from rdkit.Geometry import Point3D

        rw = chem.RWMol()
        for z in self.elements:
            rw.AddAtom(chem.Atom(int(z)))
        conf = chem.Conformer(self.n_atoms)
        for i, (a, b, c) in enumerate(pos):
            conf.SetAtomPosition(i, Point3D(float(a), float(b), float(c)))
        rw.AddConformer(conf, assignId=True)
        try:
            det.DetermineConnectivity(rw)
            bonds = {tuple(sorted((b.GetBeginAtomIdx(), b.GetEndAtomIdx()))) for b in rw.GetBonds()}
            if bonds != self.ref_bonds:
                return False
            det.DetermineBondOrders(rw, charge=self.charge)
            chem.SanitizeMol(rw)
            if any(a.GetNumRadicalElectrons() or a.GetNumImplicitHs() for a in rw.GetAtoms()):
                return False
            return chem.MolToSmiles(chem.RemoveHs(rw)) == self.ref_smiles
        except Exception:  # RDKit raises on impossible valences / failed perception: invalid
            return False

    def hard(self, x: torch.Tensor) -> torch.Tensor:
        weak = self.weak.hard(x)
        pos = x.detach().reshape(x.shape[0], self.n_atoms, 3).cpu().numpy()
        ok = [bool(w) and self._valid_one(p) for w, p in zip(weak.tolist(), pos)]
        return torch.tensor(ok, dtype=torch.bool, device=x.device)

    def soft(self, x: torch.Tensor) -> torch.Tensor:
        return self.weak.soft(x)


def rdkit_seed(seed: int) -> int:
    """RDKit embedding seed for a run seed: seed + 1. ``randomSeed = 0`` makes this RDKit build return
    the same conformer every time (measured: 3000 identical O-C-C-O dihedrals), and -1 means unseeded."""
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return int(seed) + 1


def generate_conformers(
    smiles: str = "OCCO",
    n: int = 2000,
    seed: int = 0,
    source: str = "torsion",
    dihedral_idx: tuple[int, int, int, int] = (0, 1, 2, 3),
    dihedral_range: tuple[float, float] | None = (30.0, 90.0),
) -> np.ndarray:
    """Conformers of ``smiles`` (explicit H), Kabsch-aligned to the first; returns (M, N, 3) in Angstrom.

    source="torsion": ETKDGv3 embeddings (other torsions and H rotamers vary), the ``dihedral_idx``
        torsion set to phi ~ U(dihedral_range) and MMFF-minimised with that torsion constrained, so the
        data fill the range (one basin) instead of collapsing to its minimum.
    source="etkdg": ETKDGv3 + free MMFF minimisation; only conformers with the dihedral inside
        ``dihedral_range`` are kept (None keeps all).
    """
    chem, allchem, _ = require_rdkit()
    from rdkit.Chem import rdForceFieldHelpers, rdMolTransforms

    if source not in ("torsion", "etkdg"):
        raise ValueError(f"source must be 'torsion' or 'etkdg', got {source!r}")
    mol = chem.MolFromSmiles(smiles)
    if mol is None:
        raise ValueError(f"RDKit cannot parse SMILES {smiles!r}")
    mol = chem.AddHs(mol)
    params = allchem.ETKDGv3()
    params.randomSeed = rdkit_seed(seed)
    ids = list(allchem.EmbedMultipleConfs(mol, numConfs=int(n), params=params))
    if not ids:
        raise RuntimeError(f"RDKit could not embed {smiles!r}")
    i0, i1, i2, i3 = (int(i) for i in dihedral_idx)
    if source == "torsion":
        if dihedral_range is None:
            raise ValueError("source='torsion' needs a dihedral_range")
        props = rdForceFieldHelpers.MMFFGetMoleculeProperties(mol)
        phis = np.random.default_rng(seed).uniform(*dihedral_range, size=len(ids))
        for cid, phi in zip(ids, phis):
            conf = mol.GetConformer(cid)
            rdMolTransforms.SetDihedralDeg(conf, i0, i1, i2, i3, float(phi))
            ff = rdForceFieldHelpers.MMFFGetMoleculeForceField(mol, props, confId=cid)
            ff.MMFFAddTorsionConstraint(i0, i1, i2, i3, False, float(phi), float(phi), 1e4)
            ff.Minimize(maxIts=500)
    else:
        allchem.MMFFOptimizeMoleculeConfs(mol)
    phi = np.array([rdMolTransforms.GetDihedralDeg(mol.GetConformer(c), i0, i1, i2, i3) for c in ids])
    pos = np.stack([mol.GetConformer(c).GetPositions() for c in ids])
    if source == "etkdg" and dihedral_range is not None:
        pos = pos[(phi >= dihedral_range[0]) & (phi <= dihedral_range[1])]
    if len(pos) == 0:
        raise RuntimeError(f"no conformer of {smiles!r} has the dihedral {dihedral_idx} in {dihedral_range}")
    return kabsch_align(pos, pos[0])


def load_conformers(path) -> np.ndarray:
    """A local ``.npy`` of conformers, (M, n_atoms, 3) or (M, 3 n_atoms), in Angstrom."""
    arr = np.load(path)
    if arr.ndim == 2 and arr.shape[1] % 3 == 0:
        arr = arr.reshape(arr.shape[0], -1, 3)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.shape[0] < 10:
        raise ExperimentError(
            f"{path}: expected an array (M >= 10, n_atoms, 3) of conformer positions, got shape {arr.shape}"
        )
    if not np.isfinite(arr).all():
        raise ExperimentError(f"{path}: non-finite coordinates")
    return arr


T3_METHODS = ("FDC", "NSE", "L-FE")


def conformer_methods(cfg: ConformerConfig) -> dict:
    """FDC / NSE / L-FE of the conformer task (same beta, gamma, K and oracle; paper App. G.5)."""
    common = dict(K=cfg.K, gamma=cfg.gamma, gamma_schedule="const", beta=cfg.beta, expand_am=cfg.am, project_am=cfg.am)
    return {
        "FDC": method_config("FDC", eps=cfg.fdc_eps, lambda_scale=1.0, lambda_cutoff=1.0, **common),
        "NSE": method_config("NSE", lambda_scale=1.0, **common),
        "L-FE": method_config("L-FE", eta=cfg.eta, lambda_scale=1.0, **common),
    }


def _conformer_data(cfg: ConformerConfig, seed: int, ctx: RunContext | None) -> tuple[np.ndarray, str]:
    if cfg.conformers:
        path = ctx.require_path("t3.conformers") if isinstance(ctx, RunContext) else cfg.conformers
        return load_conformers(path), str(cfg.conformers)
    pos = generate_conformers(cfg.smiles, cfg.n_conformers, seed, cfg.source, cfg.dihedral, cfg.dihedral_range)
    if pos.shape[0] < 10:
        raise ExperimentError(
            f"RDKit produced {pos.shape[0]} conformers of {cfg.smiles} with the dihedral in "
            f"{cfg.dihedral_range} (need >= 10); use source=torsion or more n_conformers"
        )
    return pos, f"RDKit {cfg.source} conformers of {cfg.smiles}, dihedral {cfg.dihedral} in {cfg.dihedral_range}"


def _verifiers(cfg: ConformerConfig, n_atoms: int) -> tuple[Verifier, Verifier]:
    weak = MinDistanceVerifier(n_atoms, cfg.threshold, cfg.slope)
    if cfg.validity == "mindist":
        return weak, weak
    truth = RDKitConformerVerifier(cfg.smiles, cfg.threshold, cfg.slope)
    if truth.n_atoms != n_atoms:
        raise ExperimentError(f"SMILES {cfg.smiles} has {truth.n_atoms} atoms with H, conformers have {n_atoms}")
    return truth, weak


def _evaluate(model, cfg: ConformerConfig, truth: Verifier, weak: Verifier, n_atoms: int, seed: int) -> dict:
    dim = 3 * n_atoms
    x = sample_ode(model, cfg.n_eval, dim, cfg.ode_steps, torch.Generator().manual_seed(10_000 + seed)).cpu()
    if not torch.isfinite(x).all():
        raise ExperimentError("non-finite conformer samples")
    p = x.numpy().reshape(cfg.n_eval, n_atoms, 3)
    out = {
        "validity": float(truth.hard(x).float().mean()),
        "weak_validity": float(weak.hard(x).float().mean()),
        "vendi": conformer_vendi(p[: cfg.vendi_n]),
    }
    if n_atoms >= 4:
        phi = dihedral(p, cfg.dihedral)
        lo, hi = cfg.dihedral_range
        out["basins"] = basin_coverage(phi)
        out["frac_outside_data_range"] = float(np.mean((phi < lo) | (phi > hi)))
        out["dihedral_std"] = float(np.std(phi))
    return out


def run_conformer_seed(cfg: ConformerConfig, seed: int, device: str = "cpu", ctx=None) -> tuple[dict, str]:
    """One seed of T3 / the paper path: data, FM pre-training, FDC / NSE / L-FE, evaluation of all four.

    ctx: None, a RunContext, or any object with ``logger(series) -> log(step, **scalars)`` (e.g. the
    experiment's per-job recorder in a worker process); a RunContext also resolves ``t3.conformers``.
    """
    pos, source = _conformer_data(cfg, seed, ctx)
    n_atoms = pos.shape[1]
    truth, weak = _verifiers(cfg, n_atoms)
    flat = torch.tensor(pos.reshape(pos.shape[0], -1), dtype=torch.float32)
    torch.manual_seed(seed)
    model = VelocityMLP(flat.shape[1], cfg.hidden, cfg.depth).to(device)
    log = ctx.logger(f"seed{seed}/t3_fm") if ctx is not None else None
    pretrain_flow_matching(model, flat, cfg.fm, seed=seed, log=log)
    metrics = {"PRE": _evaluate(model, cfg, truth, weak, n_atoms, seed)}
    metrics["data"] = _evaluate_data(pos, cfg)
    for name, fe_cfg in conformer_methods(cfg).items():
        t0 = time.perf_counter()
        log = ctx.logger(f"seed{seed}/t3_{name}") if ctx is not None else None
        fine = flow_expansion(model, weak, fe_cfg, seed=seed, log=log).model
        metrics[name] = {**_evaluate(fine, cfg, truth, weak, n_atoms, seed), "seconds": time.perf_counter() - t0}
    return metrics, source


def _evaluate_data(pos: np.ndarray, cfg: ConformerConfig) -> dict:
    out = {"n": int(pos.shape[0]), "vendi": conformer_vendi(pos[: cfg.vendi_n])}
    if pos.shape[1] >= 4:
        phi = dihedral(pos, cfg.dihedral)
        out.update(basins=basin_coverage(phi), dihedral_min=float(phi.min()), dihedral_max=float(phi.max()))
    return out


def run_conformers(ctx: RunContext, cfg: ConformerConfig) -> tuple[dict, dict, dict, list[str]]:
    """All seeds of T3 in this process; returns (metrics, measured {"C3": ...}, tables, notes).
    (The registered run dispatches the seeds as jobs and calls :func:`summarise_conformers`.)"""
    per_seed, source = [], ""
    with torch_threads(cfg.threads):
        for seed in ctx.progress(ctx.seeds, desc="T3 seeds"):
            m, source = run_conformer_seed(cfg, seed, ctx.device, ctx)
            per_seed.append(m)
    return summarise_conformers(ctx, cfg, per_seed, source)


def summarise_conformers(
    ctx: RunContext, cfg: ConformerConfig, per_seed: list[dict], source: str
) -> tuple[dict, dict, dict, list[str]]:
    """Per-seed T3 metrics (in the order of ``ctx.seeds``) to (metrics, measured {"C3": ...}, tables, notes)."""
    names = ["PRE", *T3_METHODS]
    keys = [k for k in per_seed[0]["PRE"]]
    metrics = {"T3": {n: {k: [m[n][k] for m in per_seed] for k in per_seed[0][n]} for n in [*names, "data"]}}
    summary = {n: {k: mean_std(metrics["T3"][n][k]) for k in keys} for n in names}
    metrics["T3_summary"] = summary
    rows = [[n] + [f"{summary[n][k]['mean']:.3f} ± {summary[n][k]['std']:.3f}" for k in keys] for n in names]
    mean = {n: {k: summary[n][k]["mean"] for k in ("validity", "vendi")} for n in names}
    c3 = {
        "vendi_PRE": mean["PRE"]["vendi"],
        "vendi_LFE": mean["L-FE"]["vendi"],
        "valid_PRE": mean["PRE"]["validity"],
        "valid_LFE": mean["L-FE"]["validity"],
        "valid_FDC": mean["FDC"]["validity"],
        "valid_NSE": mean["NSE"]["validity"],
        "vendi_FDC": mean["FDC"]["vendi"],
        "vendi_NSE": mean["NSE"]["vendi"],
    }
    gate = {"rule": "validity(PRE) >= 0.8 on T3", "value": c3["valid_PRE"], "passed": c3["valid_PRE"] >= 0.8}
    metrics["T3_competence_gate"] = gate
    tables = {f"T3 conformers: mean ± std over seeds {list(ctx.seeds)}": markdown_table(["method", *keys], rows)}
    notes = [
        f"T3 data: {source}; validity: {cfg.validity}; weak verifier: min distance >= {cfg.threshold} A, "
        f"soft slope {cfg.slope}. Conformer Vendi: RBF kernel (median bandwidth) on sorted-distance "
        "fingerprints."
    ]
    return metrics, {"C3": c3}, tables, notes
