"""Linear probes and the two forgetting measures.

* A_ij (shallow accuracy): test accuracy on task j of the network's own head after session i.
* A*_ij (deep accuracy): test accuracy on task j of a linear probe re-fitted on the frozen
  features phi_i. Official choice (CIL): one multinomial logistic regression over all seen classes,
  fit on the full training sets of tasks <= i, ``LogisticRegression(C=10, max_iter=5000)``; TIL:
  one probe per task.
* Shallow forgetting F_sh^{i->j} = A_jj - A_ij; deep forgetting F_dp^{i->j} = A*_jj - A*_ij
  (the paper's definition). The reported number is the mean over the old tasks j < T at the final
  session i = T:

      F = 1/(T-1) * sum_{j<T} (A_jj - A_Tj)                 reference="diagonal" (paper, default)
      F = 1/(T-1) * sum_{j<T} (max_{k<=T} A_kj - A_Tj)      reference="max" (Mammoth's logger,
                                                              ``utils/metrics.py::forgetting``)

  The two differ when accuracy on task j rises after it was learned (e.g. the CIL probe of a later
  session, or replay that improves an old task).
"""

from __future__ import annotations

import numpy as np
import torch


class LinearProbe:
    """Multinomial logistic regression with the sklearn objective

        min_{W,b}  C * sum_i CE(W z_i + b, y_i) + 1/2 ||W||^2

    backend "sklearn": ``sklearn.linear_model.LogisticRegression(C, max_iter)`` (lbfgs, official);
    backend "torch": the same objective minimised with torch L-BFGS (for large feature sets, GPU).
    blas_threads: BLAS threads for the sklearn backend (None: library default).
    """

    def __init__(
        self,
        C: float = 10.0,
        max_iter: int = 5000,
        backend: str = "sklearn",
        device: str = "cpu",
        blas_threads: int | None = 1,
    ):
        if C <= 0:
            raise ValueError(f"probe C must be > 0, got {C}")
        if backend not in ("sklearn", "torch"):
            raise ValueError(f"unknown probe backend '{backend}'; valid: sklearn, torch")
        self.C, self.max_iter, self.backend, self.device = C, max_iter, backend, device
        self.blas_threads = blas_threads
        self.classes_: np.ndarray | None = None

    def fit(self, z: np.ndarray, y: np.ndarray) -> LinearProbe:
        z, y = np.asarray(z, dtype=np.float64), np.asarray(y)
        self.classes_ = np.unique(y)
        if len(self.classes_) < 2:
            self._const = self.classes_[0]
            return self
        self._const = None
        if self.backend == "sklearn":
            import warnings

            from sklearn.exceptions import ConvergenceWarning
            from sklearn.linear_model import LogisticRegression
            from threadpoolctl import threadpool_limits

            # one BLAS thread: on a shared 2-core machine multi-threaded BLAS made lbfgs ~25x slower
            with warnings.catch_warnings(), threadpool_limits(limits=self.blas_threads):
                warnings.simplefilter("ignore", ConvergenceWarning)
                self._model = LogisticRegression(C=self.C, max_iter=self.max_iter).fit(z, y)
        else:
            self._fit_torch(z, y)
        return self

    def _fit_torch(self, z: np.ndarray, y: np.ndarray) -> None:
        zt = torch.as_tensor(z, dtype=torch.float64, device=self.device)
        yt = torch.as_tensor(np.searchsorted(self.classes_, y), device=self.device)
        w = torch.zeros(zt.shape[1], len(self.classes_), dtype=torch.float64, device=self.device, requires_grad=True)
        b = torch.zeros(len(self.classes_), dtype=torch.float64, device=self.device, requires_grad=True)
        opt = torch.optim.LBFGS(
            [w, b],
            lr=1,
            max_iter=self.max_iter,
            tolerance_grad=1e-7,
            tolerance_change=1e-10,
            history_size=20,
            line_search_fn="strong_wolfe",
        )

        def closure():
            opt.zero_grad()
            loss = self.C * torch.nn.functional.cross_entropy(zt @ w + b, yt, reduction="sum") + 0.5 * (w * w).sum()
            loss.backward()
            return loss

        opt.step(closure)
        self._w, self._b = w.detach(), b.detach()

    def predict(self, z: np.ndarray) -> np.ndarray:
        if self.classes_ is None:
            raise RuntimeError("probe not fitted")
        if self._const is not None:
            return np.full(len(z), self._const)
        if self.backend == "sklearn":
            return self._model.predict(np.asarray(z, dtype=np.float64))
        zt = torch.as_tensor(np.asarray(z, dtype=np.float64), device=self.device)
        return self.classes_[(zt @ self._w + self._b).argmax(1).cpu().numpy()]

    def score(self, z: np.ndarray, y: np.ndarray) -> float:
        return float((self.predict(z) == np.asarray(y)).mean())


FORGETTING_REFERENCES = ("diagonal", "max")


def forgetting(acc: np.ndarray, final: int | None = None, reference: str = "diagonal") -> float:
    """F = mean_{j < i} (ref_j - A_ij) at session ``i = final`` (default: the last row), in the matrix's units.

    ``acc[i, j]``: accuracy on task j after session i (entries j > i are ignored).
    reference: "diagonal" (paper): ref_j = A_jj; "max" (Mammoth logger): ref_j = max_{j<=k<=i} A_kj.
    """
    if reference not in FORGETTING_REFERENCES:
        raise ValueError(f"unknown forgetting reference '{reference}'; valid: {', '.join(FORGETTING_REFERENCES)}")
    acc = np.asarray(acc, dtype=float)
    if acc.ndim != 2 or acc.shape[0] != acc.shape[1]:
        raise ValueError(f"accuracy matrix must be square (T x T), got shape {acc.shape}")
    i = acc.shape[0] - 1 if final is None else int(final)
    if i < 1:
        raise ValueError("forgetting needs at least two sessions")
    j = np.arange(i)
    if reference == "diagonal":
        ref = acc[j, j]
    else:  # max over the sessions k = j..i (Mammoth pads unseen entries with 0, which never win the max)
        ref = np.array([np.max(acc[jj : i + 1, jj]) for jj in j])
    vals = ref - acc[i, j]
    if not np.all(np.isfinite(vals)):
        raise ValueError("accuracy matrix has missing entries on the diagonal or final row")
    return float(vals.mean())


def forgetting_matrix(acc: np.ndarray) -> np.ndarray:
    """F^{i->j} = A_jj - A_ij for j <= i (NaN above the diagonal)."""
    acc = np.asarray(acc, dtype=float)
    diag = np.diag(acc)
    out = diag[None, :] - acc
    out[np.triu_indices(len(acc), 1)] = np.nan
    return out
