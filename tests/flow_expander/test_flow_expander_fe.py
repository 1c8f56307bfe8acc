"""Flow Expander: reward gradients, reductions, anchors, projection."""

import copy

import pytest
import torch
from torch import nn

from iclr26.flow_expander.adjoint_matching import AMConfig
from iclr26.flow_expander.expander import FEConfig, entropy_reward_grads, flow_expansion, method_config
from iclr26.flow_expander.flow import GaussianVelocity, VelocityMLP, sample_ode
from iclr26.flow_expander.verifiers import ConstantVerifier, EllipseVerifier

torch.set_num_threads(1)
TINY = AMConfig(n_traj=32, steps=10, n_datasets=1, grad_steps=3, batch_size=128)


class Residual(nn.Module):
    def __init__(self, mu, s, hidden=32):
        super().__init__()
        self.base = GaussianVelocity(mu, s)
        self.net = VelocityMLP(len(mu), hidden, 2)
        self.dim = len(mu)

    def forward(self, x, t):
        return self.base(x, t) + self.net(x, t)


def params(m):
    return torch.cat([p.detach().flatten() for p in m.parameters()])


def test_first_variation_and_reparametrisation():
    """grad f = -gamma~ lambda (s_prev - beta s_pre); L-FE's -(1+alpha) gamma (s - beta s_pre) equals it
    with gamma~ = (1 + alpha) gamma and beta = alpha / (1 + alpha); beta = 0 gives grad delta H = -s."""
    prev, pre = GaussianVelocity([0.5, 0.0], [0.9, 1.2]), GaussianVelocity([0.0, 0.0], [0.5, 0.5])
    x, t = torch.randn(20, 2), torch.full((20,), 0.6)
    alpha, gamma = 1.5, 0.2
    cfg = FEConfig(beta=alpha / (1 + alpha), lambda_schedule="const", lambda_scale=1.0, lambda_cutoff=1.0)
    _, grad_f = entropy_reward_grads(cfg, (1 + alpha) * gamma, prev, pre)
    direct = -(gamma * (prev.score(x, t) + alpha * (prev.score(x, t) - pre.score(x, t))))
    assert torch.allclose(grad_f(x, t), direct, atol=1e-5)
    cfg0 = FEConfig(beta=0.0, lambda_schedule="const", lambda_scale=1.0, lambda_cutoff=1.0)
    grad_r, grad_f0 = entropy_reward_grads(cfg0, 1.0, prev, pre)
    assert torch.allclose(grad_f0(x, t), -prev.score(x, t), atol=1e-5)
    # terminal reward = running gradient at 1 - eps
    t1 = torch.full((20,), 1 - cfg0.eps)
    assert torch.allclose(grad_r(x, torch.ones(20)), -prev.score(x, t1), atol=1e-4)


def test_lambda_cutoff_and_traj_flag():
    prev = GaussianVelocity([0.0], [1.0])
    cfg = FEConfig(lambda_cutoff=0.9, lambda_scale=1.2)
    grad_r, grad_f = entropy_reward_grads(cfg, 0.5, prev, prev)
    x = torch.randn(10, 1)
    assert torch.equal(grad_f(x, torch.full((10,), 0.95)), torch.zeros(10, 1))
    assert torch.equal(grad_r(x, torch.ones(10)), torch.zeros(10, 1))  # terminal at 1-eps > cutoff
    assert grad_f(x, torch.full((10,), 0.5)).abs().sum() > 0
    assert entropy_reward_grads(FEConfig(traj=False), 0.5, prev, prev)[1] is None
    assert method_config("S-MEME").traj is False and method_config("FDC").traj is False


def test_single_terminal_expansion_step_on_gaussian():
    """Exact MD step on entropy: N(0, s^2) -> N(0, s^2 / (1 - gamma~)) (traj=False, small eps)."""
    torch.manual_seed(0)
    s2, g = 0.25, 0.3
    am = AMConfig(n_traj=256, steps=40, n_datasets=10, grad_steps=20, batch_size=1024, lr=3e-3)
    cfg = method_config("S-MEME", K=1, gamma=g, gamma_schedule="const", eps=0.02, expand_am=am)
    res = flow_expansion(Residual([0.0], [s2**0.5], 64), None, cfg, seed=0)
    x = sample_ode(res.model, 20000, 1, 100, torch.Generator().manual_seed(1))
    target = s2 / (1 - g)
    assert abs(x.var().item() - target) < 0.1 * target


def test_reductions_eta0_is_nse_beta0_is_gfe_gamma0_is_constr():
    torch.manual_seed(0)
    model = Residual([-0.5, 0.2], [0.4, 0.3])
    ver = EllipseVerifier()
    kw = dict(K=2, gamma=0.3, expand_am=TINY, project_am=TINY)
    nse = flow_expansion(model, ver, method_config("NSE", **kw), seed=3).model
    fe0 = flow_expansion(model, ver, method_config("G-FE", eta=0.0, **kw), seed=3).model
    assert torch.equal(params(nse), params(fe0))
    lfe0 = flow_expansion(model, ver, method_config("L-FE", beta=0.0, eta=1.0, **kw), seed=3).model
    gfe = flow_expansion(model, ver, method_config("G-FE", eta=1.0, **kw), seed=3).model
    assert torch.equal(params(lfe0), params(gfe))
    constr = flow_expansion(model, ver, method_config("CONSTR", **{**kw, "gamma": 0.0}), seed=3).model
    fe_g0 = flow_expansion(model, ver, FEConfig(**{**kw, "gamma": 0.0}), seed=3).model
    assert torch.equal(params(constr), params(fe_g0))
    assert not torch.equal(params(constr), params(model))  # the projection did move it
    with pytest.raises(ValueError):
        method_config("NSE", eta=1.0)
    with pytest.raises(ValueError):
        method_config("CONSTR", gamma=0.1)


def test_pre_model_untouched_and_anchor_update():
    torch.manual_seed(0)
    model = Residual([0.0, 0.0], [0.5, 0.5])
    before = params(model).clone()
    snaps = []
    res = flow_expansion(
        model,
        EllipseVerifier(),
        method_config("G-FE", K=2, expand_am=TINY, project_am=TINY),
        seed=0,
        callback=lambda k, pi: snaps.append(params(pi).clone()),
    )
    assert torch.equal(params(model), before)  # pi_pre never changes
    assert len(snaps) == 2 and not torch.equal(snaps[0], snaps[1])
    assert torch.equal(snaps[-1], params(res.model))
    assert len(res.history) == 2 and {"expand_loss", "project_loss"} <= set(res.history[0])


def test_all_ones_verifier_makes_projection_a_noop_only_with_paper_anchor():
    """v = 1: grad log v = 0 and the anchor is Q~_k, so the project step leaves pi unchanged (paper Eq. 16).
    With the official code's anchor pi_{k-1} the same step pulls pi back towards pi_{k-1}."""
    torch.manual_seed(0)
    model = Residual([0.0, 0.0], [0.5, 0.5])
    kw = dict(K=1, gamma=0.3, expand_am=TINY, project_am=TINY)
    nse = flow_expansion(model, None, method_config("NSE", **kw), seed=1).model
    paper = flow_expansion(model, ConstantVerifier(), method_config("G-FE", eta=2.0, **kw), seed=1).model
    assert torch.equal(params(paper), params(nse))
    code = flow_expansion(
        model, ConstantVerifier(), method_config("G-FE", eta=2.0, projection_anchor="previous", **kw), seed=1
    ).model
    assert not torch.equal(params(code), params(nse))


def test_projection_raises_validity():
    torch.manual_seed(0)
    model = Residual([0.0, 0.0], [2.0, 1.2])  # much mass outside the ellipse
    ver = EllipseVerifier(3.0, 1.5, kappa=5.0)
    am = AMConfig(n_traj=256, steps=30, n_datasets=4, grad_steps=20, batch_size=1024, lr=3e-3)
    gen = torch.Generator().manual_seed(5)
    v0 = ver.hard(sample_ode(model, 4000, 2, 30, gen)).float().mean().item()
    res = flow_expansion(model, ver, method_config("CONSTR", K=1, eta=3.0, project_am=am), seed=0)
    v1 = ver.hard(sample_ode(res.model, 4000, 2, 30, torch.Generator().manual_seed(5))).float().mean().item()
    assert v1 > v0 + 0.1


def test_bad_configs_raise():
    for bad in (
        dict(K=-1),
        dict(beta=1.5),
        dict(eps=0.0),
        dict(lambda_schedule="cos"),
        dict(projection_anchor="x"),
        dict(projection_grad="x"),
        dict(gamma=-1.0),
    ):
        with pytest.raises(ValueError):
            FEConfig(**bad)
    with pytest.raises(ValueError):
        method_config("FOO")
    with pytest.raises(ValueError):
        flow_expansion(Residual([0.0], [1.0]), None, method_config("G-FE", K=1), seed=0)
    assert copy.deepcopy(FEConfig()) == FEConfig()


def test_user_model_with_velocity_method_and_soft_projection_flag():
    """A user flow exposing .velocity(x, t) plugs in through AsVelocity; projection_grad='soft' runs."""
    from iclr26.flow_expander.flow import AsVelocity

    class UserFlow(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = Residual([0.0, 0.0], [1.5, 1.0])

        def velocity(self, x, t):
            return self.net(x, t)

    torch.manual_seed(0)
    model = AsVelocity(UserFlow(), dim=2)
    ver = EllipseVerifier(kappa=5.0)
    kw = dict(K=1, expand_am=TINY, project_am=TINY)
    a = flow_expansion(model, ver, method_config("G-FE", **kw), seed=0).model
    b = flow_expansion(model, ver, method_config("G-FE", projection_grad="soft", **kw), seed=0).model
    assert not torch.equal(params(a), params(b))
    assert torch.isfinite(sample_ode(a, 64, 2, 10)).all()


def test_scores_are_clipped_at_one_minus_eps():
    """grad f_t evaluates the scores at min(t, 1 - eps): for t > 1 - eps it equals grad f_{1 - eps}
    (the score of the OT path diverges as t -> 1; paper App. G, official ``_make_fns``)."""
    prev, pre = GaussianVelocity([0.3], [0.6]), GaussianVelocity([0.0], [0.4])
    cfg = FEConfig(beta=0.5, eps=0.1, lambda_schedule="const", lambda_scale=1.0, lambda_cutoff=1.0)
    grad_r, grad_f = entropy_reward_grads(cfg, 0.4, prev, pre)
    x = torch.randn(16, 1)
    t_clip = torch.full((16,), 0.9)
    expected = -0.4 * (prev.score(x, t_clip) - 0.5 * pre.score(x, t_clip))
    for tv in (0.93, 0.97, 1.0):
        got = grad_f(x, torch.full((16,), tv))
        assert torch.isfinite(got).all() and torch.allclose(got, expected, atol=1e-4), tv
    assert torch.allclose(grad_r(x, torch.ones(16)), expected, atol=1e-4)
    # below the clip the score is evaluated at t itself
    t = torch.full((16,), 0.5)
    assert torch.allclose(grad_f(x, t), -0.4 * (prev.score(x, t) - 0.5 * pre.score(x, t)), atol=1e-5)


def test_oracle_anchors_each_call(monkeypatch):
    """Which model each Adjoint Matching call is anchored on: expand of iteration k on pi_{k-1} (= pi after
    iteration k - 1; = the pre-trained model for k = 1), project on the post-expansion snapshot Q~_k."""
    import iclr26.flow_expander.expander as fe_mod

    calls = []
    real = fe_mod.adjoint_matching

    def spy(fine, base, grad_r, grad_f, cfg, gen, log=None):
        calls.append((params(fine).clone(), params(base).clone(), grad_f is not None))
        return real(fine, base, grad_r, grad_f, cfg, gen, log=log)

    monkeypatch.setattr(fe_mod, "adjoint_matching", spy)
    torch.manual_seed(0)
    model = Residual([0.0, 0.0], [0.5, 0.5])
    flow_expansion(model, EllipseVerifier(), method_config("G-FE", K=2, expand_am=TINY, project_am=TINY), seed=0)
    assert len(calls) == 4  # (expand, project) x 2
    (f1e, b1e, _), (f1p, b1p, _), (f2e, b2e, _), (f2p, b2p, _) = calls
    assert torch.equal(b1e, params(model)) and torch.equal(f1e, params(model))
    assert torch.equal(b1p, f1p) and torch.equal(b2p, f2p)  # project anchor = Q~_k
    assert not torch.equal(b2e, params(model)) and torch.equal(b2e, f2e)  # pi_1 <- pi after iteration 1
