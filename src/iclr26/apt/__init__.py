"""APT: plug-in adaptive prompt tuning of frozen semantic embeddings for scene graph generation.

Luo et al., "APT: Towards Universal Scene Graph Generation via Plug-in Adaptive Prompt Tuning", ICLR 2026
(OpenReview IZWJhdK2o7; no arXiv version). Implemented: the core modulation ẽ = f_θ([p̄ ; e_static ; φ(v)])
with detection / relation prompts and roles (:class:`APTEmbedding`), the Compositional Generalization
Prompter (:class:`CGP`: RCG gates, BPS, FRF), the Sec. 3.3 regularisers (:func:`apt_regularizers`),
graph-constrained R@K / mR@K / F@K and the representation diagnostics (:mod:`iclr26.apt.sgg_metrics`), and a
feature-level synthetic scene-graph world (ShapesSG) with the claim reproduction.
"""

from iclr26.apt import sgg_metrics
from iclr26.apt.apt import CGP, APTEmbedding, ContextualEmbedding, RegWeights, added_parameters, apt_regularizers

__all__ = [
    "CGP",
    "APTEmbedding",
    "ContextualEmbedding",
    "RegWeights",
    "added_parameters",
    "apt_regularizers",
    "sgg_metrics",
]
