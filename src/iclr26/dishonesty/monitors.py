"""Output-only monitors of the toy reproduction (the paper's baseline: black-box judges).

* :class:`OutputMonitor` with ``features="bag"`` is the **jailbreak-style output judge**: a
  bag-of-tokens logistic classifier trained to tell refusals (0) from compliant answers (1), the
  analogue of HarmBench/WildGuard-type judges that score "harmful compliance" from the text.
* :class:`OutputMonitor` with ``features="positional"`` is the **output deception classifier**: a
  logistic classifier on position-wise one-hot response tokens (it sees every digit in place),
  trained on labelled lies (1) vs truths (0). It reads only the response: it cannot add.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class OutputMonitor:
    """Logistic classifier on response token ids. ``predict_proba`` gives P(class 1 | response)."""

    def __init__(self, vocab_size: int, features: str = "bag", max_len: int = 8, C: float = 1.0):
        if features not in ("bag", "positional"):
            raise ValueError(f"features must be 'bag' or 'positional', got {features!r}")
        self.vocab_size, self.features, self.max_len, self.C = vocab_size, features, max_len, C
        self.clf = None

    def featurize(self, responses: Sequence[Sequence[int]]) -> np.ndarray:
        V = self.vocab_size
        if self.features == "bag":
            X = np.zeros((len(responses), V))
            for i, r in enumerate(responses):
                for t in r:
                    X[i, int(t)] += 1
            return X
        X = np.zeros((len(responses), self.max_len * V))
        for i, r in enumerate(responses):
            for j, t in enumerate(list(r)[: self.max_len]):
                X[i, j * V + int(t)] = 1
        return X

    def fit(self, responses, labels) -> OutputMonitor:
        from sklearn.linear_model import LogisticRegression

        y = np.asarray(labels).astype(int)
        if len(set(y.tolist())) != 2:
            raise ValueError("OutputMonitor.fit needs both classes")
        self.clf = LogisticRegression(C=self.C, max_iter=2000).fit(self.featurize(responses), y)
        return self

    def predict_proba(self, responses) -> np.ndarray:
        if self.clf is None:
            raise RuntimeError("OutputMonitor is not fitted")
        if len(responses) == 0:
            return np.zeros(0)
        return self.clf.predict_proba(self.featurize(responses))[:, 1]
