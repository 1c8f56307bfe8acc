"""The synthetic LOF-like generator, windowing/splits, the local CSV reader and the baselines."""

import numpy as np
import pandas as pd
import pytest
import torch

from iclr26.protots.baselines import RidgeDirect, TiDELite, seasonal_naive
from iclr26.protots.config import DataConfig, SynthConfig
from iclr26.protots.data import (
    FESTIVAL_START_DOY,
    DataError,
    ExogenousWindowDataset,
    load_local_series,
    make_synthetic_load,
    make_windows,
    split_windows,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def series():
    return make_synthetic_load(SynthConfig(), seed=3)


def test_generator_shape_covariates_regimes_and_determinism(series):
    assert series.y.shape == (912 * 24,) and series.con.shape == (912 * 24, 22)
    assert series.dis_names == ["hour", "weekday", "season", "holiday"] and series.cards == [24, 7, 4, 3]
    assert sum(n.startswith("distractor") for n in series.con_names) == 16
    assert set(np.unique(series.day_regime)) == set(range(6))
    again = make_synthetic_load(SynthConfig(), seed=3)
    assert np.array_equal(again.y, series.y) and np.array_equal(again.con, series.con)
    other = make_synthetic_load(SynthConfig(), seed=4)
    assert not np.allclose(other.y, series.y)
    for k in range(len(series.cards)):
        assert series.dis[:, k].max() < series.cards[k]


def test_festival_has_two_latent_phases_under_one_flag(series):
    day = np.arange(len(series.y)) // 24
    doy = day % 365
    fest = series.festival
    assert np.array_equal(fest, series.dis[:, 3] == 2)
    assert set(np.unique(series.phase[fest])) == {1, 2}  # both phases carry the same flag
    assert np.all(series.phase[(doy >= FESTIVAL_START_DOY) & (doy < FESTIVAL_START_DOY + 7)] == 1)
    # the two phases have different daily curves
    hour = np.arange(len(series.y)) % 24
    pre = np.array([series.y[(series.phase == 1) & (hour == h)].mean() for h in range(24)])
    during = np.array([series.y[(series.phase == 2) & (hour == h)].mean() for h in range(24)])
    assert np.abs(pre - during).max() > 0.2
    # festival days are rest days in the regime label (day type x season)
    assert np.all(series.day_regime[np.unique(day[fest])] >= 3)


def test_distractors_are_unrelated_and_temperature_is_not(series):
    corr = [abs(np.corrcoef(series.y, series.con[:, j])[0, 1]) for j in range(22)]
    assert corr[0] > 0.1  # temperature (heating/cooling)
    assert max(corr[6:]) < max(corr[:6])


def test_splits_are_chronological_with_festival_in_train_and_test(series):
    sp = split_windows(series, DataConfig())
    n = len(series.y)
    assert int(sp.train.start.max()) + 24 <= int(0.7 * n)
    assert int(sp.val.start.min()) >= int(0.7 * n) and int(sp.test.start.min()) >= int(0.8 * n)
    assert bool(sp.train.festival.any()) and bool(sp.test.festival.any())
    assert torch.all(sp.test.start % 24 == 0) and torch.all(torch.diff(sp.test.start) == 24)
    assert torch.all(torch.diff(sp.train.start) == 24) and torch.all(sp.train.start % 24 == 0)
    assert abs(float(sp.series.y[: int(0.7 * n)].mean())) < 1e-6  # train statistics
    i = 5
    st = int(sp.test.start[i])
    assert torch.allclose(sp.test.y[i], torch.tensor(sp.series.y[st : st + 24], dtype=torch.float32))
    assert torch.allclose(sp.test.y_hist[i], torch.tensor(sp.series.y[st - 72 : st], dtype=torch.float32))
    assert int(sp.test.regime[i]) == int(series.day_regime[st // 24])
    half = split_windows(series, DataConfig(data_fraction=0.5))
    assert abs(len(half.train) - len(sp.train) / 2) <= 1 and torch.equal(half.train.start[-1], sp.train.start[-1])


def test_seasonal_naive_and_ridge():
    from iclr26.protots.data import Windows

    y_hist = torch.arange(72.0).repeat(2, 1)
    w = Windows(
        y_hist,
        torch.zeros(2, 96, 1, dtype=torch.long),
        torch.zeros(2, 96, 0),
        torch.zeros(2, 30),
        torch.zeros(2),
        torch.zeros(2),
        torch.zeros(2, dtype=torch.bool),
    )
    pred = seasonal_naive(w)
    assert pred.shape == (2, 30) and torch.equal(pred[0, :24], torch.arange(48.0, 72.0))
    assert torch.equal(pred[0, 24:], torch.arange(48.0, 54.0))
    g = torch.Generator().manual_seed(0)
    n, L, H = 300, 8, 3
    yh = torch.randn(n, L, generator=g)
    xc = torch.randn(n, L + H, 2, generator=g)
    y = 2 * yh[:, -1:] + xc[:, L:, 0]
    w = Windows(
        yh,
        torch.zeros(n, L + H, 1, dtype=torch.long),
        xc,
        y,
        torch.zeros(n),
        torch.zeros(n),
        torch.zeros(n, dtype=torch.bool),
    )
    r = RidgeDirect([1], alpha=1e-4).fit(w)
    assert (r.predict(w) - y).abs().max() < 1e-2
    tide = TiDELite([1], 2, L, H, hidden=16)
    assert tide(yh[:4], w.x_dis[:4], xc[:4]).shape == (4, H)


def test_tide_lite_forecast_uses_future_covariates_and_encoder():
    """The temporal decoder's width-1 output must not pass through LayerNorm (that maps it to a constant,
    so the forecast would be a linear function of the history alone, blind to every covariate)."""
    torch.manual_seed(0)
    L, H = 8, 4
    tide = TiDELite([3, 5], 2, L, H, hidden=16).eval()
    g = torch.Generator().manual_seed(1)
    yh = torch.randn(6, L, generator=g)
    xd = torch.randint(0, 3, (6, L + H, 2), generator=g)
    xc = torch.randn(6, L + H, 2, generator=g)
    base = tide(yh, xd, xc)
    xc2 = xc.clone()
    xc2[:, L + 1, 0] += 2.0  # one future continuous value
    xd2 = xd.clone()
    xd2[:, L + 2, 1] = 4  # one future discrete value
    assert (tide(yh, xd, xc2) - base).abs().max() > 1e-4
    assert (tide(yh, xd2, xc) - base).abs().max() > 1e-4
    tide.train()
    tide(yh, xd, xc).sum().backward()
    assert tide.encoder[0].net[0].weight.grad.abs().sum() > 0


def _epf_frame(n=24 * 40, seed=0):
    """A tiny frame in the EPF layout used by TimeXer (date, exogenous forecasts, target OT)."""
    rng = np.random.default_rng(seed)
    date = pd.date_range("2013-01-01 00:00:00", periods=n, freq="h")
    return pd.DataFrame(
        {
            "date": date.strftime("%Y-%m-%d %H:%M:%S"),
            "Grid load forecast": rng.normal(1000, 50, n),
            "Wind power forecast": rng.normal(300, 30, n),
            "OT": rng.normal(30, 5, n),
        }
    )


def test_csv_reader_reads_epf_layout(tmp_path):
    path = tmp_path / "NP.csv"
    _epf_frame().to_csv(path, index=False)
    s = load_local_series(DataConfig(csv=str(path), L=24, H=24))
    assert s.con_names == ["Grid load forecast", "Wind power forecast"]
    assert s.dis_names == ["hour", "weekday", "month"] and s.cards == [24, 7, 12]
    assert s.dis[:3, 0].tolist() == [0, 1, 2] and s.dis[0, 1] == 1  # 2013-01-01 was a Tuesday
    sp = split_windows(s, DataConfig(L=24, H=24))
    assert len(sp.test) > 0 and sp.test.regime[0] == -1


def test_unseen_categories_map_to_reserved_index_and_are_counted(tmp_path):
    df = _epf_frame()
    df["region"] = ["a"] * (len(df) - 24) + ["b"] * 24  # "b" appears only in the test period
    s = ExogenousWindowDataset(df, "OT", dis_cols=("region",), calendar=False)
    assert s.cards == [2]
    sp = split_windows(s, DataConfig(L=24, H=24))
    assert sp.series.n_unseen == {"region": 24}
    assert int(sp.test.x_dis.max()) == 2  # the reserved index = card


@pytest.mark.parametrize(
    "breakage,match",
    [
        ("missing", "missing column"),
        ("nan", "NaN"),
        ("dup", "duplicate timestamp"),
        ("unsorted", "not sorted"),
        ("short", "fewer than L \\+ H"),
        ("text", "not numeric"),
        ("baddate", "unparsable"),
    ],
)
def test_bad_csv_stops_with_one_line_error(tmp_path, breakage, match):
    df = _epf_frame()
    if breakage == "missing":
        df = df.drop(columns=["OT"])
    elif breakage == "nan":
        df.loc[10, "Wind power forecast"] = np.nan
    elif breakage == "dup":
        df.loc[5, "date"] = df.loc[4, "date"]
    elif breakage == "unsorted":
        df.loc[[5, 6], "date"] = df.loc[[6, 5], "date"].values
    elif breakage == "short":
        df = df.iloc[:40]
    elif breakage == "text":
        df["OT"] = "x"
    elif breakage == "baddate":
        df.loc[3, "date"] = "not a date"
    path = tmp_path / "bad.csv"
    df.to_csv(path, index=False)
    with pytest.raises(DataError, match=match) as info:
        load_local_series(DataConfig(csv=str(path), L=24, H=24))
    assert "\n" not in str(info.value)


def test_make_windows_rejects_too_short_range(series):
    with pytest.raises(ValueError, match="no window"):
        make_windows(series, 72, 24, 0, 50, 6)
