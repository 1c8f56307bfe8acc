"""Data for ProtoTS: a seeded LOF-like synthetic load generator, windowing, and a local CSV/Parquet reader.

The paper's LOF data (load with 22 exogenous variables, Chinese holidays) is not available offline, so
:func:`make_synthetic_load` stands in for it: hourly load built from regime daily profiles, season,
temperature and AR noise; calendar variables; 6 informative and ``n_distractors`` unrelated continuous
covariates; a yearly festival with two latent sub-phases (pre-festival, during festival) under one flag;
and each day's true regime (day type x season) for the interpretability check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from iclr26.protots.config import DataConfig, SynthConfig

SEASONS = ("winter", "summer", "shoulder")
DAY_TYPES = ("workday", "rest")
FESTIVAL_START_DOY = 35  # pre-festival phase starts on day 35 of every year (like the Spring Festival)
HOLIDAY_DOYS = (0, 120, 273, 274, 275)  # single public holidays (day of year)


@dataclass
class Series:
    """A multivariate hourly series before windowing.

    y: (n,) target; dis: (n, C_dis) int categories; con: (n, C_con) float; cards: categories per discrete
    column; dis_names / con_names: column names; day_regime: (n // 24,) true regime id per day (synthetic
    only, else None); festival: (n,) bool hour-in-festival flag (synthetic only); phase: (n,) 0 none,
    1 pre-festival, 2 during festival (synthetic only); n_unseen: count of unseen categories mapped to the
    reserved index (per discrete column), filled in by :func:`standardise_and_encode`.
    """

    y: np.ndarray
    dis: np.ndarray
    con: np.ndarray
    cards: list[int]
    dis_names: list[str]
    con_names: list[str]
    day_regime: np.ndarray | None = None
    festival: np.ndarray | None = None
    phase: np.ndarray | None = None
    n_unseen: dict[str, int] = field(default_factory=dict)


def _ar1(rng: np.random.Generator, n: int, phi: float, sigma: float) -> np.ndarray:
    """x_t = phi x_{t-1} + e_t, e_t ~ N(0, sigma^2), x_0 = e_0."""
    e = rng.normal(0.0, sigma, n).tolist()
    acc, out = 0.0, [0.0] * n
    for t in range(n):
        acc = phi * acc + e[t]
        out[t] = acc
    return np.asarray(out)


def _profiles() -> dict[str, np.ndarray]:
    """Daily shapes (24 h, mean ~1): workday with 3 peaks, flatter rest day, low holiday, two festival phases."""
    h = np.arange(24)

    def bump(c: float, w: float) -> np.ndarray:
        return np.exp(-0.5 * ((h - c) / w) ** 2)

    base = 0.55 + 0.1 * bump(3, 3)
    return {
        "workday": base + 0.55 * bump(9, 1.6) + 0.45 * bump(14, 1.8) + 0.6 * bump(19.5, 1.7),
        "rest": base + 0.25 * bump(11, 3.0) + 0.35 * bump(20, 2.2),
        "holiday": 0.8 * base + 0.15 * bump(12, 4.0) + 0.25 * bump(20, 2.0),
        "pre_festival": base + 0.2 * bump(8, 2.0) + 0.75 * bump(16, 2.5) + 0.3 * bump(21, 1.5),
        "festival": 0.55 * base + 0.1 * bump(13, 3.0) + 0.55 * bump(23, 1.2),
    }


def make_synthetic_load(cfg: SynthConfig | None = None, seed: int = 0) -> Series:
    r"""The LOF-like series (hourly, starting on a Monday, 1 January).

    load_t = s(season) * profile_{regime(day)}(hour) * (1 + 0.05 activity_t)
             + a * max(0, T_t - 24)^2 * (1 + 0.5 humidity_t) + b * max(0, 12 - T_t) * (1 + 0.3 wind_t)
             - 0.15 * solar_t * (1 - cloud_t) + AR(1) noise
    """
    cfg = cfg or SynthConfig()
    rng = np.random.default_rng(seed)
    n_days = int(cfg.days)
    if n_days < 10:
        raise ValueError(f"days must be >= 10, got {n_days}")
    n = n_days * 24
    t = np.arange(n)
    hour, day = t % 24, t // 24
    doy = day % 365
    weekday = day % 7
    season4 = ((doy + 31) // 91) % 4  # 0 winter (Dec-Feb), 1 spring, 2 summer, 3 autumn
    season3 = np.select([season4 == 0, season4 == 2], [0, 1], 2)  # winter / summer / shoulder
    # holidays: 0 none, 1 single public holiday, 2 festival (both sub-phases share the flag)
    f0, fl = FESTIVAL_START_DOY, int(cfg.festival_days)
    phase = np.where((doy >= f0) & (doy < f0 + fl), 1, np.where((doy >= f0 + fl) & (doy < f0 + 2 * fl), 2, 0))
    holiday = np.where(phase > 0, 2, np.where(np.isin(doy, HOLIDAY_DOYS), 1, 0))
    rest_day = (weekday >= 5) | (holiday > 0)
    # informative continuous covariates
    temp = (
        13
        - 11 * np.cos(2 * np.pi * (doy - 15) / 365)
        + 4 * np.sin(2 * np.pi * (hour - 9) / 24)
        + _ar1(rng, n, 0.97, 0.6)
    )
    humidity = np.clip(0.6 + 0.2 * np.sin(2 * np.pi * doy / 365) + _ar1(rng, n, 0.95, 0.05), 0, 1)
    cloud = np.clip(0.5 + _ar1(rng, n, 0.98, 0.08), 0, 1)
    solar = np.clip(np.sin(np.pi * (hour - 6) / 12), 0, None) * (1 + 0.3 * np.cos(2 * np.pi * (doy - 172) / 365))
    wind = np.abs(_ar1(rng, n, 0.97, 0.25))
    activity = _ar1(rng, n, 0.999, 0.03)
    # load from regime profiles
    prof = _profiles()
    shape = np.where(rest_day, prof["rest"][hour], prof["workday"][hour])
    shape = np.where(holiday == 1, prof["holiday"][hour], shape)
    shape = np.where(phase == 1, prof["pre_festival"][hour], shape)
    shape = np.where(phase == 2, prof["festival"][hour], shape)
    amp = np.array([1.1, 1.05, 0.9])[season3]
    load = (
        amp * shape * (1 + 0.05 * activity)
        + 0.004 * np.maximum(0, temp - 24) ** 2 * (1 + 0.5 * humidity)
        + 0.02 * np.maximum(0, 12 - temp) * (1 + 0.3 * wind)
        - 0.15 * solar * (1 - cloud)
        + _ar1(rng, n, 0.9, cfg.noise_std)
    )
    distract = []
    for k in range(int(cfg.n_distractors)):
        if k % 2 == 0:
            distract.append(np.cumsum(rng.normal(0, 0.1, n)))
        else:
            distract.append(_ar1(rng, n, rng.uniform(0.5, 0.99), 1.0))
    con = np.column_stack([temp, humidity, solar, cloud, wind, activity] + distract)
    con_names = ["temperature", "humidity", "solar", "cloud", "wind", "activity"] + [
        f"distractor_{k}" for k in range(int(cfg.n_distractors))
    ]
    dis = np.column_stack([hour, weekday, season4, holiday]).astype(np.int64)
    day_rest = rest_day.reshape(n_days, 24)[:, 0]
    day_regime = (day_rest.astype(int) * 3 + season3.reshape(n_days, 24)[:, 0]).astype(np.int64)
    return Series(
        y=load.astype(np.float64),
        dis=dis,
        con=con.astype(np.float64),
        cards=[24, 7, 4, 3],
        dis_names=["hour", "weekday", "season", "holiday"],
        con_names=con_names,
        day_regime=day_regime,
        festival=holiday == 2,
        phase=phase,
    )


# --------------------------------------------------------------------------------------------------
# Windows
# --------------------------------------------------------------------------------------------------


@dataclass
class Windows:
    """Materialised forecasting windows (all torch tensors).

    y_hist (n, L); x_dis (n, L+H, C_dis) long; x_con (n, L+H, C_con); y (n, H) target;
    start (n,) index of the first forecast step in the series; regime (n,) true regime of the forecast
    day (-1 if unknown); festival (n,) bool: the forecast window touches the festival.
    """

    y_hist: torch.Tensor
    x_dis: torch.Tensor
    x_con: torch.Tensor
    y: torch.Tensor
    start: torch.Tensor
    regime: torch.Tensor
    festival: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, idx) -> Windows:
        return Windows(
            *(getattr(self, k)[idx] for k in ("y_hist", "x_dis", "x_con", "y", "start", "regime", "festival"))
        )

    def inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.y_hist, self.x_dis, self.x_con


def make_windows(s: Series, L: int, H: int, lo: int, hi: int, stride: int, align: int = 0) -> Windows:
    """Windows whose forecast steps [f, f+H) lie in [lo, hi) and whose history [f-L, f) lies in [0, hi).

    ``align``: first forecast step index modulo 24 (0 = forecasts start at midnight) for day-ahead windows.
    """
    first = max(lo, L)
    first += (align - first) % 24 if stride % 24 == 0 else 0
    starts = np.arange(first, hi - H + 1, stride)
    if len(starts) == 0:
        raise ValueError(f"no window of L={L}, H={H} fits in rows [{lo}, {hi})")
    idx = starts[:, None] + np.arange(-L, H)[None, :]
    y = torch.tensor(s.y[idx], dtype=torch.float32)
    mid_day = (starts + H // 2) // 24
    regime = (
        torch.tensor(s.day_regime[np.minimum(mid_day, len(s.day_regime) - 1)])
        if s.day_regime is not None
        else torch.full((len(starts),), -1, dtype=torch.long)
    )
    fest = (
        torch.tensor(s.festival[idx[:, L:]].any(1))
        if s.festival is not None
        else torch.zeros(len(starts), dtype=torch.bool)
    )
    return Windows(
        y_hist=y[:, :L].contiguous(),
        x_dis=torch.tensor(s.dis[idx], dtype=torch.long),
        x_con=torch.tensor(s.con[idx], dtype=torch.float32),
        y=y[:, L:].contiguous(),
        start=torch.tensor(starts),
        regime=regime,
        festival=fest,
    )


@dataclass
class Splits:
    """Train/validation/test windows plus the target's training mean/std (for de-standardising)."""

    train: Windows
    val: Windows
    test: Windows
    y_mean: float
    y_std: float
    series: Series


def standardise_and_encode(s: Series, n_train: int) -> tuple[Series, float, float]:
    """z-score the target and continuous covariates with training-period statistics; map discrete
    categories unseen in the training period to the reserved index ``card`` (counted in ``n_unseen``)."""
    ym, ys = float(s.y[:n_train].mean()), float(s.y[:n_train].std() + 1e-8)
    cm, cs = s.con[:n_train].mean(0), s.con[:n_train].std(0) + 1e-8
    dis = s.dis.copy()
    n_unseen = {}
    for j, name in enumerate(s.dis_names):
        seen = np.unique(s.dis[:n_train, j])
        bad = ~np.isin(dis[:, j], seen) | (dis[:, j] < 0) | (dis[:, j] >= s.cards[j])
        n_unseen[name] = int(bad.sum())
        dis[bad, j] = s.cards[j]
    out = Series(
        y=(s.y - ym) / ys,
        dis=dis,
        con=(s.con - cm) / cs,
        cards=s.cards,
        dis_names=s.dis_names,
        con_names=s.con_names,
        day_regime=s.day_regime,
        festival=s.festival,
        phase=s.phase,
        n_unseen=n_unseen,
    )
    return out, ym, ys


def split_windows(s: Series, cfg: DataConfig) -> Splits:
    """Chronological train/val/test split (70/10/20), standardisation with training statistics, windows
    (training stride ``train_stride``, day-ahead validation/test windows every ``eval_stride`` hours)."""
    n = len(s.y)
    a, b = int(n * cfg.train_frac), int(n * (cfg.train_frac + cfg.val_frac))
    if not (0 < cfg.train_frac < 1 and 0 <= cfg.val_frac < 1 - cfg.train_frac):
        raise ValueError(f"bad split fractions {cfg.train_frac}, {cfg.val_frac}")
    if not 0 < cfg.data_fraction <= 1:
        raise ValueError(f"data_fraction must be in (0, 1], got {cfg.data_fraction}")
    s2, ym, ys = standardise_and_encode(s, a)
    train = make_windows(s2, cfg.L, cfg.H, 0, a, cfg.train_stride)
    if cfg.data_fraction < 1:
        keep = max(1, int(round(len(train) * cfg.data_fraction)))
        train = train.subset(slice(len(train) - keep, None))
    val = make_windows(s2, cfg.L, cfg.H, a, b, cfg.eval_stride)
    test = make_windows(s2, cfg.L, cfg.H, b, n, cfg.eval_stride)
    return Splits(train, val, test, ym, ys, s2)


# --------------------------------------------------------------------------------------------------
# Local files (paper scale): LOF release or EPF in TimeXer's CSV format (date, covariates..., OT)
# --------------------------------------------------------------------------------------------------


class DataError(ValueError):
    """A local data file that cannot be used as it is; the message names the problem in one line."""


def read_table(path: str | Path):
    """A local CSV or Parquet file as a pandas DataFrame (nothing is downloaded)."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file")
    if path.suffix.lower() in (".parquet", ".pq"):
        try:
            return pd.read_parquet(path)
        except ImportError as exc:
            raise DataError(f"{path}: reading Parquet needs pyarrow or fastparquet ({exc})") from None
    return pd.read_csv(path)


def ExogenousWindowDataset(
    df,
    target: str,
    dis_cols: tuple[str, ...] = (),
    con_cols: tuple[str, ...] | None = None,
    date_col: str = "date",
    calendar: bool = True,
) -> Series:
    """Check a DataFrame (one row per time step) and turn it into a :class:`Series`.

    Stops with a one-line :class:`DataError` for a missing column, NaN, unparsable/duplicate/unsorted
    timestamps. ``con_cols=None``: every numeric column except the target and the discrete ones.
    ``calendar``: add hour (24), weekday (7) and month (12) discrete covariates from the timestamps.
    Discrete columns are encoded by their sorted distinct values; the series is windowed by
    :func:`split_windows` (which also maps categories unseen in training to the reserved index).
    """
    import pandas as pd

    cols = list(df.columns)
    need = [date_col, target, *dis_cols, *(con_cols or ())]
    missing = [c for c in need if c not in cols]
    if missing:
        raise DataError(f"missing column(s) {missing}; the file has {cols}")
    if con_cols is None:
        con_cols = tuple(
            c for c in cols if c not in (date_col, target, *dis_cols) and pd.api.types.is_numeric_dtype(df[c])
        )
    for c in (target, *con_cols):
        if not pd.api.types.is_numeric_dtype(df[c]):
            raise DataError(f"column {c!r} is not numeric")
    nan_cols = [c for c in (date_col, target, *dis_cols, *con_cols) if df[c].isna().any()]
    if nan_cols:
        raise DataError(f"NaN in column(s) {nan_cols} (first at row {int(df[nan_cols[0]].isna().values.argmax())})")
    try:
        ts = pd.to_datetime(df[date_col])
    except (ValueError, TypeError) as exc:
        raise DataError(f"column {date_col!r} holds unparsable timestamps ({str(exc).splitlines()[0]})") from None
    if ts.duplicated().any():
        raise DataError(f"duplicate timestamp {ts[ts.duplicated()].iloc[0]} in column {date_col!r}")
    if not ts.is_monotonic_increasing:
        bad = int(np.argmax(np.diff(ts.values.astype("int64")) < 0)) + 1
        raise DataError(f"timestamps in column {date_col!r} are not sorted (row {bad})")
    dis, cards, names = [], [], []
    for c in dis_cols:
        codes, uniques = pd.factorize(df[c], sort=True)
        dis.append(codes)
        cards.append(len(uniques))
        names.append(c)
    if calendar:
        for name, values, card in (
            ("hour", ts.dt.hour, 24),
            ("weekday", ts.dt.day_of_week, 7),
            ("month", ts.dt.month - 1, 12),
        ):
            dis.append(values.to_numpy())
            cards.append(card)
            names.append(name)
    n = len(df)
    dis_arr = np.column_stack(dis).astype(np.int64) if dis else np.zeros((n, 0), dtype=np.int64)
    con_arr = df[list(con_cols)].to_numpy(dtype=np.float64) if con_cols else np.zeros((n, 0))
    return Series(
        y=df[target].to_numpy(dtype=np.float64),
        dis=dis_arr,
        con=con_arr,
        cards=cards,
        dis_names=names,
        con_names=list(con_cols),
    )


def load_local_series(cfg: DataConfig) -> Series:
    """The paper-scale series from ``cfg.csv`` (LOF or EPF), checked for length L + H at least."""
    df = read_table(cfg.csv)
    s = ExogenousWindowDataset(
        df, cfg.target, tuple(cfg.dis_cols), tuple(cfg.con_cols) or None, cfg.date_col, cfg.calendar
    )
    if len(s.y) < cfg.L + cfg.H:
        raise DataError(f"{cfg.csv}: {len(s.y)} rows, fewer than L + H = {cfg.L + cfg.H}")
    return s
