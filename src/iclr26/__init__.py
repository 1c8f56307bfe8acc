"""iclr26: 19 ICLR 2026 papers as tested, reproducible library code.

Each paper lives in its own sub-package (``iclr26.<slug>``) and builds only on ``iclr26.core``.
``iclr26 list`` shows the registered reproductions; ``iclr26 run SLUG --scale small`` runs one.
"""

__version__ = "0.1.0"


def run(
    slug: str,
    scale: str = "small",
    seeds=None,
    out: str = "runs",
    show_progress: bool = True,
    sets: dict | None = None,
    **overrides,
):
    """Run one paper's reproduction from Python, the same as ``iclr26 run``.

    ``overrides`` set config fields, with ``__`` for the dots of ``--set`` keys
    (``iclr26.run("daedal", "smoke", seeds=[0], method__tau_eos=0.4)``), or pass ``sets={"a.b": v}``.
    Returns the :class:`~iclr26.core.experiment.RunRecord` (``out_dir``, ``results``, ``claims``).
    """
    from iclr26.core.experiment import LOAD_ERRORS, ExperimentError, discover, run_experiment

    exps = discover()
    if slug not in exps:
        detail = LOAD_ERRORS.get(slug)
        raise ExperimentError(
            f"paper '{slug}' failed to load: {detail}"
            if detail
            else f"unknown paper '{slug}'; valid: {', '.join(exps)}"
        )
    options = {k.replace("__", "."): v for k, v in overrides.items()}
    options.update(sets or {})
    return run_experiment(exps[slug], scale, seeds, out, options, show_progress=show_progress)
