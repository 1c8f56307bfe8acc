"""Linear deception probes (paper Section 5; recipe of Goldowsky-Dill et al. 2025).

Layer convention (ours, used everywhere in this package): ``layer = L`` is the residual stream
``hidden_states[L]`` in the Hugging Face sense, i.e. the *output of decoder block L-1* (0-based
blocks), ``1 <= L <= n_layers``. It is read with a forward hook on that block, so for the last layer
it is the stream *before* any final norm (HF's ``hidden_states[-1]`` of GPT-2 is after ``ln_f``).

Probe (symbol w, trained on instructed honest/dishonest pairs, positive class = dishonest)::

    z_t   = (h_t - mu) / sigma                 standardisation with *training* statistics only
    s_t   = z_t · w                            per-token logit (no intercept: b = 0)
    S(r)  = (1/|R|) Σ_{t in R} s_t             response score = mean over the selected tokens R
    flag  = S(r) > tau,  tau = calibrate_threshold(S(control), fpr=0.01)

Steering direction (raw activation space; the normal of the hyperplane s_t = 0)::

    v = (w / sigma) / ||w / sigma||            so s_t = h_t · (w/sigma) - mu · (w/sigma)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from iclr26.core.transformer import Transformer


def decoder_blocks(model: nn.Module) -> list[nn.Module]:
    """The decoder blocks of a core :class:`Transformer` or of a Hugging Face causal LM."""
    if isinstance(model, Transformer):
        return list(model.blocks)
    from iclr26.core.hf import residual_stream_modules

    return residual_stream_modules(model)


def _block_output(out) -> Tensor:
    return out[0] if isinstance(out, tuple | list) else out


def _model_device(model: nn.Module) -> torch.device:
    dev = getattr(model, "device", None)
    if isinstance(dev, torch.device):
        return dev
    return next(model.parameters()).device


@torch.no_grad()
def gather_activations(
    model: nn.Module,
    input_ids: Tensor,
    *,
    layers: Sequence[int],
    attention_mask: Tensor | None = None,
    batch_size: int = 256,
) -> dict[int, Tensor]:
    """Residual-stream activations ``hidden_states[L]`` for each ``L`` in ``layers``, via forward hooks.

    Works on core :class:`~iclr26.core.transformer.Transformer` models and on Hugging Face causal LMs
    (blocks found by :func:`iclr26.core.hf.residual_stream_modules`; any ``device_map``).

    input_ids: [N, T] (right-padded); attention_mask: [N, T], 1 = real token.
    Returns {L: float32 CPU tensor [N, T, d]}. Padded positions hold whatever the model computes
    there; select tokens with a mask (see :func:`masked_mean`, :func:`select_tokens`).
    """
    blocks = decoder_blocks(model)
    layers = [int(L) for L in layers]
    for L in layers:
        if not 1 <= L <= len(blocks):
            raise ValueError(f"layer {L} out of range 1..{len(blocks)} (layer L = output of block L-1)")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [N, T], got shape {tuple(input_ids.shape)}")
    if attention_mask is not None and attention_mask.shape != input_ids.shape:
        raise ValueError("attention_mask must have the shape of input_ids")
    store: dict[int, list[Tensor]] = {L: [] for L in layers}
    handles = []
    for L in layers:

        def hook(_module, _inp, out, L=L):
            store[L].append(_block_output(out).detach().float().cpu())

        handles.append(blocks[L - 1].register_forward_hook(hook))
    was_training = model.training
    model.eval()
    device = _model_device(model)
    try:
        for i in range(0, input_ids.shape[0], batch_size):
            kwargs = {"input_ids": input_ids[i : i + batch_size].to(device)}
            if attention_mask is not None:
                kwargs["attention_mask"] = attention_mask[i : i + batch_size].to(device)
            model(**kwargs)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return {L: torch.cat(store[L], 0) for L in layers}


class _StopForward(Exception):
    """Raised by the capture hook of :func:`stream_activations`: the layers above are not needed."""


@torch.no_grad()
def stream_activations(
    model: nn.Module,
    input_ids: Tensor,
    token_mask: Tensor,
    *,
    layer: int,
    path,
    attention_mask: Tensor | None = None,
    batch_size: int = 8,
) -> tuple[np.ndarray, np.ndarray]:
    """Activations ``hidden_states[layer]`` of the selected tokens only, streamed to ``path`` (``.npy``,
    float16) batch by batch, so a long control set never sits in RAM as ``[N, T, d]`` float32.

    The forward pass stops after block ``layer - 1`` (nothing above it, not even the logits, is
    computed). token_mask: bool [N, T], True on the tokens to keep. Returns (read-only memmap
    [n_tokens, d] in row-major token order, offsets [N + 1]: row i owns tokens offsets[i]:offsets[i+1]).
    """
    blocks = decoder_blocks(model)
    if not 1 <= layer <= len(blocks):
        raise ValueError(f"layer {layer} out of range 1..{len(blocks)} (layer L = output of block L-1)")
    if token_mask.shape != input_ids.shape:
        raise ValueError("token_mask must have the shape of input_ids")
    token_mask = token_mask.bool()
    counts = token_mask.sum(1).numpy()
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    out, pos, batch_mask = None, 0, None

    def hook(_module, _inp, output):
        nonlocal out, pos
        h = _block_output(output)
        sel = h[batch_mask.to(h.device)].detach().to("cpu", torch.float16).numpy()
        if out is None:
            out = np.lib.format.open_memmap(
                str(path), mode="w+", dtype=np.float16, shape=(int(offsets[-1]), h.shape[-1])
            )
        out[pos : pos + len(sel)] = sel
        pos += len(sel)
        raise _StopForward

    handle = blocks[layer - 1].register_forward_hook(hook)
    was_training = model.training
    model.eval()
    device = _model_device(model)
    try:
        for i in range(0, input_ids.shape[0], batch_size):
            batch_mask = token_mask[i : i + batch_size]
            kwargs = {"input_ids": input_ids[i : i + batch_size].to(device)}
            if attention_mask is not None:
                kwargs["attention_mask"] = attention_mask[i : i + batch_size].to(device)
            try:
                model(**kwargs)
            except _StopForward:
                pass
    finally:
        handle.remove()
        model.train(was_training)
    if out is None:
        raise ValueError("stream_activations: no input rows")
    out.flush()
    del out
    return np.load(str(path), mmap_mode="r"), offsets


def select_tokens(acts: Tensor, mask: Tensor) -> Tensor:
    """[N, T, d] activations and bool [N, T] mask -> [n_selected, d] (row-major order)."""
    if acts.shape[:2] != mask.shape:
        raise ValueError(f"mask {tuple(mask.shape)} does not match activations {tuple(acts.shape[:2])}")
    return acts[mask.bool()]


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` [N, T] over the True positions of ``mask`` [N, T] per row -> [N]."""
    m = mask.to(values.dtype)
    counts = m.sum(1)
    if (counts == 0).any():
        raise ValueError("a row has no selected token; cannot average")
    return (values * m).sum(1) / counts


@dataclass(frozen=True)
class ProbeConfig:
    """Probe settings (paper Section 5 / Apollo recipe defaults as far as known).

    C: inverse L2 strength of sklearn's LogisticRegression (Apollo default λ = 10 -> C = 0.1).
    standardize: z-score features with the training mean/std before the fit.
    fit_intercept: the paper's probe has no intercept.
    max_iter: solver iterations.
    """

    C: float = 0.1
    standardize: bool = True
    fit_intercept: bool = False
    max_iter: int = 2000


class DeceptionProbe:
    """Standardised logistic-regression probe without intercept; positive class = dishonest (y = 1).

    ``fit(X, y)`` on token activations [n, d]; ``token_logits(H)`` gives s_t for [..., d];
    ``score_response(acts, mask)`` the mean per-token logit per response; ``direction()`` the unit
    raw-space steering vector v.
    """

    def __init__(self, C: float = 0.1, standardize: bool = True, fit_intercept: bool = False, max_iter: int = 2000):
        self.config = ProbeConfig(C=C, standardize=standardize, fit_intercept=fit_intercept, max_iter=max_iter)
        if not C > 0:
            raise ValueError(f"C must be > 0, got {C}")
        self.mu: np.ndarray | None = None
        self.sigma: np.ndarray | None = None
        self.coef_: np.ndarray | None = None
        self.intercept_: float = 0.0

    @classmethod
    def from_config(cls, cfg: ProbeConfig) -> DeceptionProbe:
        return cls(C=cfg.C, standardize=cfg.standardize, fit_intercept=cfg.fit_intercept, max_iter=cfg.max_iter)

    def fit(self, X, y) -> DeceptionProbe:
        from sklearn.linear_model import LogisticRegression

        X = _as_numpy(X).astype(np.float64)
        y = np.asarray(y).astype(int).ravel()
        if X.ndim != 2 or X.shape[0] != y.shape[0]:
            raise ValueError(f"X must be [n, d] with n = len(y); got {X.shape} and {y.shape}")
        if set(np.unique(y).tolist()) != {0, 1}:
            raise ValueError("y must contain both classes 0 (honest) and 1 (dishonest)")
        if self.config.standardize:
            self.mu = X.mean(0)
            sd = X.std(0)
            self.sigma = np.where(sd > 1e-8, sd, 1.0)
        else:
            self.mu, self.sigma = np.zeros(X.shape[1]), np.ones(X.shape[1])
        clf = LogisticRegression(
            C=self.config.C, fit_intercept=self.config.fit_intercept, max_iter=self.config.max_iter
        )
        clf.fit((X - self.mu) / self.sigma, y)
        self.coef_ = clf.coef_[0].astype(np.float64)
        self.intercept_ = float(clf.intercept_[0]) if self.config.fit_intercept else 0.0
        return self

    def _check(self) -> None:
        if self.coef_ is None:
            raise RuntimeError("DeceptionProbe is not fitted")

    def token_logits(self, H) -> np.ndarray:
        """s_t = ((h_t - mu) / sigma) · w + b for activations [..., d] -> [...]."""
        self._check()
        H = _as_numpy(H).astype(np.float64)
        if H.shape[-1] != self.coef_.shape[0]:
            raise ValueError(f"activations have width {H.shape[-1]}, probe expects {self.coef_.shape[0]}")
        return ((H - self.mu) / self.sigma) @ self.coef_ + self.intercept_

    def score_response(self, acts, mask) -> np.ndarray:
        """S(r) = mean of s_t over the True positions of ``mask`` [N, T] for ``acts`` [N, T, d] -> [N]."""
        logits = torch.from_numpy(self.token_logits(acts))
        return masked_mean(logits, torch.as_tensor(np.asarray(mask)).bool()).numpy()

    def score_stream(self, acts: np.ndarray, offsets: np.ndarray, chunk: int = 65536) -> np.ndarray:
        """S(r) for token activations stored flat ([n_tokens, d], e.g. the float16 memmap of
        :func:`stream_activations`) with row offsets [N + 1]: the mean of s_t over each row's tokens."""
        offsets = np.asarray(offsets, dtype=np.int64)
        counts = np.diff(offsets)
        if (counts <= 0).any():
            raise ValueError("a row has no selected token; cannot average")
        logits = np.concatenate(
            [
                self.token_logits(np.asarray(acts[i : i + chunk], dtype=np.float64))
                for i in range(0, int(offsets[-1]), chunk)
            ]
        )
        return np.add.reduceat(logits, offsets[:-1]) / counts

    def direction(self, space: str = "raw") -> np.ndarray:
        """Unit steering vector. ``"raw"``: v = (w/sigma)/||w/sigma|| (the gradient of s_t w.r.t. h_t;
        default, our reading of the official code); ``"standardized"``: w/||w|| used as is."""
        self._check()
        if space == "raw":
            v = self.coef_ / self.sigma
        elif space == "standardized":
            v = self.coef_.copy()
        else:
            raise ValueError(f"space must be 'raw' or 'standardized', got {space!r}")
        return v / np.linalg.norm(v)


def class_separation(probe: DeceptionProbe, X, y) -> float:
    """The steering unit: the distance between the two classes' mean projections on the unit raw-space
    probe direction v over the training tokens, mean_{y=1}(h · v) - mean_{y=0}(h · v)."""
    proj = _as_numpy(X).astype(np.float64) @ probe.direction("raw")
    y = np.asarray(y).astype(bool).ravel()
    if proj.shape[0] != y.shape[0] or y.all() or not y.any():
        raise ValueError("class_separation needs one label per row and both classes")
    return float(proj[y].mean() - proj[~y].mean())


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x)


def calibrate_threshold(control_scores, fpr: float = 0.01) -> float:
    """Threshold tau with at most floor(fpr · n) control scores strictly above it (flag: S > tau).

    tau is the (k+1)-th largest control score, k = floor(fpr · n). Ties at tau are not flagged, so
    the empirical false-positive rate on the control set is <= fpr.
    """
    s = np.sort(np.asarray(control_scores, dtype=float).ravel())[::-1]
    if s.size == 0:
        raise ValueError("calibrate_threshold needs at least one control score")
    if not 0 <= fpr < 1:
        raise ValueError(f"fpr must be in [0, 1), got {fpr}")
    if not np.isfinite(s).all():
        raise ValueError("control scores contain NaN or inf")
    k = int(math.floor(fpr * s.size + 1e-12))
    return float(s[min(k, s.size - 1)])


def auroc(scores_pos, scores_neg) -> float:
    """Area under the ROC curve = P(S_pos > S_neg) + 0.5 P(S_pos = S_neg) (Mann-Whitney)."""
    p = np.asarray(scores_pos, dtype=float).ravel()
    n = np.asarray(scores_neg, dtype=float).ravel()
    if p.size == 0 or n.size == 0:
        return float("nan")
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([p, n]))
    return float((ranks[: p.size].sum() - p.size * (p.size + 1) / 2) / (p.size * n.size))


def f1_score(pred, truth) -> float:
    """F1 of the positive class for boolean predictions and labels."""
    pred, truth = np.asarray(pred, bool), np.asarray(truth, bool)
    tp = float((pred & truth).sum())
    denom = float(pred.sum() + truth.sum())
    return 2 * tp / denom if denom else float("nan")
