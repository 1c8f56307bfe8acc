"""The registered reproduction of AceReason-Nemotron 1.1 on the toy ordered-sum task (E1-E4).

E1: SFT on (N prompts, R responses) datasets mirroring v1..v7, avg@8 at T = 0.6 on held-out hard
prompts, and the paper's regression z = a std(log2 N) + b std(log2 R) + c.
E2: strict on-policy GRPO from the (1600, 1) init at T in {0.6, 0.85, 1.0, 1.3} and at T*
calibrated to H_T = 0.3. E3: the same RL at T* (re-calibrated) from a weak and a strong init.
E4 (reported only): overlong filtering on / off at a budget of 0.6x the teacher length.
"""

from __future__ import annotations

from iclr26.core.experiment import Claim, Experiment, RunContext, RunOutput

from .config import RunConfig, config_for

C1_TOL = 0.03  # |H_T* - target| on fresh rollouts
C2_MARGIN = 2.0  # points over T = 0.6; slack to the best grid T
C3_SHRINK = 0.7  # gap after RL <= 0.7x the gap before
C4_R2 = 0.7


def _untestable(m: dict) -> None:
    """The real scale marks a claim untestable (target unreachable on the T range, gate failed): it fails
    with that reason instead of being judged."""
    if m.get("untestable"):
        raise ValueError(f"untestable: {m['untestable']}")


def _c1(m: dict) -> bool:
    _untestable(m)
    h = [m["h_grid"][t] for t in sorted(m["h_grid"], key=float)]
    increasing = all(a < b for a, b in zip(h, h[1:], strict=False))
    near = abs(m["h_fresh_t_star"] - m["target"]) <= C1_TOL
    return increasing and near and m["zero_adv_step0"]["1.0"] < m["zero_adv_step0"]["0.6"]


def _c2(m: dict) -> bool:
    _untestable(m)
    return m["acc_t_star"] >= m["acc"]["0.6"] + C2_MARGIN and m["acc_t_star"] >= max(m["acc"].values()) - C2_MARGIN


def _c3(m: dict) -> bool:
    before = m["strong_before"] - m["weak_before"]
    after = m["strong_after"] - m["weak_after"]
    return before > 0 and after > 0 and after <= C3_SHRINK * before


def _c4(m: dict) -> bool:
    return m["a"] > m["b"] > 0 and m["r2"] >= C4_R2 and m["acc_2n_x1"] > m["acc_n_x2"]


CLAIMS = (
    Claim(
        "C1",
        "Mechanism of the temperature rule: on the SFT init's rollouts H_T rises strictly over the T grid, "
        "the calibrated T* gives H_T within 0.03 of the 0.3 target on fresh rollouts, and fewer groups have "
        "zero advantage at step 0 at T = 1.0 than at T = 0.6 (means over seeds)",
        "T = 0.85 gives H_T ~ 0.3 for the v7 init; T = 0.6 keeps H_T < 0.2 (Fig. 5)",
        "H_T(0.6) < H_T(0.85) < H_T(1.0) < H_T(1.3) and |H_T*(fresh) - 0.3| <= 0.03 and "
        "zero_adv(T=1.0) < zero_adv(T=0.6)",
        _c1,
    ),
    Claim(
        "C2",
        "RL at the entropy-calibrated T* beats the low fixed temperature 0.6 and is near the best fixed T "
        "(held-out hard avg@8 at T = 0.6, mean over seeds)",
        "AIME24 67.6 at T = 0.85 vs 64.6 at 0.6 and 65.3 at 1.0",
        "acc(T*) >= acc(0.6) + 2 and acc(T*) >= max_T acc(T) - 2",
        _c2,
    ),
    Claim(
        "C3",
        "A stronger SFT init stays ahead after the same RL at T*, with a narrower gap",
        "AIME24 gap v5 vs v7: 6.6 before RL -> 1.6 after",
        "strong_after - weak_after > 0 and <= 0.7 x (strong_before - weak_before), with that gap > 0",
        _c3,
    ),
    Claim(
        "C4",
        "SFT scaling: more prompts and more responses both help, prompts more "
        "(z = a std(log2 N) + b std(log2 R) + c over the 7 datasets), and (1600,1) beats (800,2) "
        "at equal sample count",
        {"a": 4.831, "b": 2.635, "r2": 0.989},
        "a > b > 0 and R^2 >= 0.7 (fit on seed-mean accuracies) and acc(2N, 1) > acc(N, 2) "
        "for the largest such pair (1600x1 vs 800x2)",
        _c4,
    ),
)


def run(ctx: RunContext) -> RunOutput:
    """Toy scales run E1-E4 (:mod:`.report_toy`); the paper scale calibrates a local checkpoint."""
    cfg: RunConfig = ctx.cfg
    if ctx.scale == "real":
        from .real import run_real

        return run_real(ctx)
    if ctx.scale == "paper":
        from .paper import run_paper

        return run_paper(ctx)
    from .report_toy import run_toy

    return run_toy(ctx, cfg)


EXPERIMENT = Experiment(
    slug="acereason",
    title="AceReason-Nemotron 1.1: Advancing Math and Code Reasoning through SFT and RL Synergy",
    arxiv="2506.13284",
    claims=CLAIMS,
    run=run,
    config=config_for,
    scales=("smoke", "small", "real", "paper"),
)
