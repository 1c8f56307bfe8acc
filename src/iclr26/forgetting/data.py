"""Continual-learning datasets: a sequence of tasks, each owning a disjoint set of classes.

Labels are remapped to the order in which classes arrive, so task ``t`` of ``K`` classes owns
labels ``t*K .. t*K+K-1`` (this is what a class-incremental single head and a multi-head TIL
network both index by). Every tensor lives in memory; buffers store *indices* into ``x_train``.

Sources:

* :func:`split_digits`: scikit-learn's bundled ``load_digits`` (1,797 8x8 images), standardised,
  stratified 70/30 split, 5 tasks x 2 classes, class order permuted by the seed.
* :func:`orthogonal_subspace_tasks`: a synthetic stress test: 10 classes in
  R^100, each task's class means in its own random 4-d subspace (norm 4 sigma), isotropic noise
  sigma = 1 plus a shared high-variance nuisance subspace, 300 samples per class.
* :func:`load_npz_tasks`: user features/labels from local ``.npz`` files (paper scale).
* :func:`load_image_folder`: an image-folder dataset on local disk (``root/train/<class>/*.png``,
  ``root/test/<class>/*.png``), e.g. CIFAR-100 exported to PNG (paper scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


@dataclass
class ContinualData:
    """A task sequence held in memory.

    x_train, x_test: inputs (N, ...) float tensors.
    y_train, y_test: labels (N,) int64, remapped to arrival order (task t owns a contiguous block).
    t_train, t_test: task id of every sample (N,) int64.
    task_classes: ``task_classes[t]`` = the labels task t owns.
    name: a short name for tables.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    t_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    t_test: torch.Tensor
    task_classes: list[list[int]]
    name: str = "data"

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            x, y, t = (getattr(self, f"{k}_{split}") for k in ("x", "y", "t"))
            if not (len(x) == len(y) == len(t)):
                raise ValueError(f"{self.name}: {split} sizes differ: x={len(x)}, y={len(y)}, t={len(t)}")
            if len(y) == 0:
                raise ValueError(f"{self.name}: empty {split} split")
        seen: set[int] = set()
        for t, cls in enumerate(self.task_classes):
            if not cls or seen & set(cls):
                raise ValueError(f"{self.name}: task {t} classes {cls} are empty or overlap an earlier task")
            seen |= set(cls)
        if seen != set(range(len(seen))):
            raise ValueError(f"{self.name}: labels must be 0..C-1 in arrival order, got {sorted(seen)}")
        owner = torch.full((len(seen),), -1, dtype=torch.long)
        for t, cls in enumerate(self.task_classes):
            owner[cls] = t
        for split in ("train", "test"):
            y, t = getattr(self, f"y_{split}"), getattr(self, f"t_{split}")
            if y.min() < 0 or y.max() >= len(seen) or not torch.equal(owner[y], t):
                raise ValueError(f"{self.name}: {split} task ids do not match the labels' tasks")

    @property
    def n_tasks(self) -> int:
        return len(self.task_classes)

    @property
    def n_classes(self) -> int:
        return sum(len(c) for c in self.task_classes)

    def class_indices(self, c: int, split: str = "train") -> np.ndarray:
        """Indices of class ``c`` in ``split`` (dataset order)."""
        y = self.y_train if split == "train" else self.y_test
        return np.flatnonzero(y.numpy() == c)

    def task_indices(self, t: int | list[int], split: str = "train") -> np.ndarray:
        """Indices of the samples of task ``t`` (or of several tasks) in ``split``."""
        tt = (self.t_train if split == "train" else self.t_test).numpy()
        return np.flatnonzero(np.isin(tt, np.atleast_1d(t)))


def _tasks_from_labels(x_tr, y_tr, x_te, y_te, n_tasks: int, order: np.ndarray, name: str) -> ContinualData:
    """Remap labels so ``order[k]`` becomes k, split classes into ``n_tasks`` equal consecutive tasks."""
    n_classes = len(order)
    if n_classes % n_tasks:
        raise ValueError(f"{name}: {n_classes} classes do not split into {n_tasks} equal tasks")
    k = n_classes // n_tasks
    remap = np.empty(int(order.max()) + 1, dtype=np.int64)
    remap[order] = np.arange(n_classes)
    y_tr, y_te = remap[y_tr], remap[y_te]
    return ContinualData(
        x_train=torch.as_tensor(x_tr, dtype=torch.float32),
        y_train=torch.as_tensor(y_tr),
        t_train=torch.as_tensor(y_tr // k),
        x_test=torch.as_tensor(x_te, dtype=torch.float32),
        y_test=torch.as_tensor(y_te),
        t_test=torch.as_tensor(y_te // k),
        task_classes=[list(range(t * k, (t + 1) * k)) for t in range(n_tasks)],
        name=name,
    )


def _stratified_split(y: np.ndarray, test_frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) index arrays of a stratified split (``sklearn.model_selection.train_test_split``)."""
    from sklearn.model_selection import train_test_split

    tr, te = train_test_split(np.arange(len(y)), test_size=test_frac, stratify=y, random_state=seed)
    return np.sort(tr), np.sort(te)


def split_digits(seed: int, n_tasks: int = 5, test_frac: float = 0.3, permute_classes: bool = True) -> ContinualData:
    """Split-digits: ``load_digits`` standardised (train statistics), 70/30 stratified, 5 tasks x 2 classes."""
    from sklearn.datasets import load_digits

    rng = np.random.default_rng(seed)
    x, y = load_digits(return_X_y=True)
    tr, te = _stratified_split(y, test_frac, seed)
    mu, sd = x[tr].mean(0), x[tr].std(0)
    sd[sd == 0] = 1.0  # constant border pixels
    x = (x - mu) / sd
    order = rng.permutation(10) if permute_classes else np.arange(10)
    return _tasks_from_labels(x[tr], y[tr], x[te], y[te], n_tasks, order, "split-digits")


def orthogonal_subspace_tasks(
    seed: int,
    n_tasks: int = 5,
    classes_per_task: int = 2,
    dim: int = 100,
    subspace_dim: int = 4,
    mean_norm: float = 4.0,
    noise: float = 1.0,
    nuisance_dim: int = 10,
    nuisance_std: float = 2.0,
    n_per_class: int = 300,
    test_frac: float = 0.3,
) -> ContinualData:
    """Synthetic tasks whose class means live in mutually orthogonal subspaces.

    x = Q_t v_c + sigma * eps + N z,  eps ~ N(0, I_dim),  z ~ N(0, s^2 I_nuisance)
    with Q_t (dim x subspace_dim) orthonormal and orthogonal to every other task's Q and to the
    nuisance basis N, and v_c of norm ``mean_norm`` (4 sigma), the classes of a task along orthogonal
    directions of its subspace (so every pair of classes is 4 sqrt(2) sigma apart). A feature map must use
    *different input directions* for each task, so deep forgetting without replay is non-trivial by construction.
    """
    need = n_tasks * subspace_dim + nuisance_dim
    if need > dim:
        raise ValueError(f"dim={dim} too small for {n_tasks} x {subspace_dim}-d subspaces + {nuisance_dim} nuisance")
    rng = np.random.default_rng(10_000 + seed)
    basis, _ = np.linalg.qr(rng.standard_normal((dim, need)))
    nuis = basis[:, n_tasks * subspace_dim :]
    xs, ys = [], []
    for t in range(n_tasks):
        q = basis[:, t * subspace_dim : (t + 1) * subspace_dim]
        # the task's class means: mutually orthogonal directions of the subspace, norm mean_norm
        # (random directions can land close together and make a task nearly inseparable)
        rot, _ = np.linalg.qr(rng.standard_normal((subspace_dim, subspace_dim)))
        for k in range(classes_per_task):
            v = mean_norm * rot[:, k % subspace_dim]
            n = n_per_class
            iso = noise * rng.standard_normal((n, dim))
            nuisance = nuisance_std * rng.standard_normal((n, nuisance_dim)) @ nuis.T
            x = q @ v + iso + nuisance
            xs.append(x)
            ys.append(np.full(n, t * classes_per_task + k))
    x, y = np.concatenate(xs), np.concatenate(ys)
    tr, te = _stratified_split(y, test_frac, 10_000 + seed)
    order = np.arange(n_tasks * classes_per_task)  # the construction is already random per seed
    return _tasks_from_labels(x[tr], y[tr], x[te], y[te], n_tasks, order, "orthogonal-subspaces")


def load_npz_tasks(
    path: str | Path, n_tasks: int | None = None, seed: int = 0, permute_classes: bool = False, name: str | None = None
) -> ContinualData:
    """Tasks from local ``.npz`` files.

    ``path`` is either one ``.npz`` with arrays ``x_train, y_train, x_test, y_test`` (classes are split
    into ``n_tasks`` equal consecutive tasks, after an optional seeded permutation), or a folder of
    ``task*.npz`` files (sorted by name), one per task, each with those four arrays; there every
    task's labels must be disjoint from the other tasks' labels.
    """
    path = Path(path)
    keys = ("x_train", "y_train", "x_test", "y_test")

    def read(p: Path) -> dict[str, np.ndarray]:
        with np.load(p) as z:
            missing = [k for k in keys if k not in z.files]
            if missing:
                raise ValueError(f"{p}: missing arrays {missing} (need {', '.join(keys)})")
            return {k: np.asarray(z[k]) for k in keys}

    if path.is_dir():
        files = sorted(path.glob("task*.npz"))
        if not files:
            raise ValueError(f"{path}: no task*.npz files")
        parts = [read(f) for f in files]
        order: list[int] = []
        for p in parts:
            order += [int(c) for c in np.unique(p["y_train"])]
        if len(set(order)) != len(order):
            raise ValueError(f"{path}: tasks share labels")
        cat = {k: np.concatenate([p[k] for p in parts]) for k in keys}
        sizes = {len(np.unique(p["y_train"])) for p in parts}
        if len(sizes) != 1:
            raise ValueError(f"{path}: tasks have different numbers of classes {sorted(sizes)}")
        n_tasks = len(parts)
        order_arr = np.asarray(order)
    else:
        cat = read(path)
        classes = np.unique(cat["y_train"])
        if n_tasks is None:
            raise ValueError("a single .npz needs n_tasks")
        order_arr = np.random.default_rng(seed).permutation(classes) if permute_classes else classes
    if set(np.unique(cat["y_test"])) - set(order_arr.tolist()):
        raise ValueError(f"{path}: test labels not present in train labels")
    x_tr = cat["x_train"].reshape(len(cat["x_train"]), -1) if cat["x_train"].ndim == 1 else cat["x_train"]
    x_te = cat["x_test"].reshape(len(cat["x_test"]), -1) if cat["x_test"].ndim == 1 else cat["x_test"]
    return _tasks_from_labels(
        x_tr,
        cat["y_train"].astype(np.int64),
        x_te,
        cat["y_test"].astype(np.int64),
        n_tasks,
        order_arr,
        name or path.stem,
    )


IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp")


def load_image_folder(
    root: str | Path,
    n_tasks: int,
    seed: int = 0,
    permute_classes: bool = True,
    image_size: int | None = None,
    name: str | None = None,
) -> ContinualData:
    """An image-folder dataset: ``root/{train,test}/<class name>/<image>`` (e.g. CIFAR-100 as PNGs).

    Images are loaded into memory as float tensors in [0, 1], normalised per channel with the train
    mean/std, shape (N, 3, H, W). Class names are sorted; the order is permuted by the seed
    (``--permute_classes=1`` in the official code) and split into ``n_tasks`` equal tasks.
    """
    from PIL import Image

    root = Path(root)
    splits = {}
    for split in ("train", "test"):
        d = root / split
        if not d.is_dir():
            raise ValueError(f"{root}: no '{split}' folder (expected root/train/<class>/*.png and root/test/...)")
        splits[split] = sorted(p for p in d.iterdir() if p.is_dir())
    names = [p.name for p in splits["train"]]
    if [p.name for p in splits["test"]] != names:
        raise ValueError(f"{root}: train and test class folders differ")
    if not names:
        raise ValueError(f"{root}: no class folders")

    def load(split: str) -> tuple[np.ndarray, np.ndarray]:
        xs, ys = [], []
        for c, folder in enumerate(splits[split]):
            files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTS)
            if not files:
                raise ValueError(f"{folder}: no images")
            for f in files:
                with Image.open(f) as im:
                    im = im.convert("RGB")
                    if image_size is not None:
                        im = im.resize((image_size, image_size))
                    xs.append(np.asarray(im, dtype=np.uint8))
                ys.append(c)
        shapes = {a.shape for a in xs}
        if len(shapes) != 1:
            raise ValueError(f"{root}/{split}: images have different sizes {sorted(shapes)}; pass image_size")
        return np.stack(xs), np.asarray(ys, dtype=np.int64)

    x_tr, y_tr = load("train")
    x_te, y_te = load("test")
    x_tr = x_tr.astype(np.float32).transpose(0, 3, 1, 2) / 255.0
    x_te = x_te.astype(np.float32).transpose(0, 3, 1, 2) / 255.0
    mu = x_tr.mean(axis=(0, 2, 3), keepdims=True)
    sd = x_tr.std(axis=(0, 2, 3), keepdims=True) + 1e-8
    x_tr, x_te = (x_tr - mu) / sd, (x_te - mu) / sd
    order = np.random.default_rng(seed).permutation(len(names)) if permute_classes else np.arange(len(names))
    return _tasks_from_labels(x_tr, y_tr, x_te, y_te, n_tasks, order, name or root.name)


# ---------------------------------------------------------------------------------------------------
# CIFAR-10 / CIFAR-100 as distributed (the "python version" pickle batches)
# ---------------------------------------------------------------------------------------------------

#: name -> (folder inside root, train files, test files, label key). The layout torchvision's
#: ``CIFAR10`` / ``CIFAR100`` read: ``root/cifar-10-batches-py/data_batch_{1..5}, test_batch`` and
#: ``root/cifar-100-python/train, test`` (each a pickled dict with ``data`` (N, 3072) uint8 rows in
#: channel-major order and the labels under ``labels`` or ``fine_labels``).
CIFAR_LAYOUT = {
    "cifar10": ("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)), ("test_batch",), "labels"),
    "cifar100": ("cifar-100-python", ("train",), ("test",), "fine_labels"),
}
CIFAR_MEAN_STD = {  # official datasets/seq_cifar10.py, seq_cifar100.py: MEAN, STD
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2615)),
    "cifar100": ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
}


def find_cifar(root: str | Path) -> tuple[str, Path] | None:
    """(name, root) when ``root`` holds CIFAR-10/100 in the distributed layout (or is that folder)."""
    root = Path(root)
    for name, (folder, *_rest) in CIFAR_LAYOUT.items():
        if (root / folder).is_dir():
            return name, root
        if root.name == folder and root.is_dir():
            return name, root.parent
    return None


def _cifar_torchvision(name: str, root: Path, train: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """torchvision's dataset class (download off); None when torchvision cannot be imported.

    Its md5 checks are replaced by a presence check (and its class-name meta file is not read), so
    the same code reads a subset of the files in the same layout.
    """
    try:
        from torchvision.datasets import CIFAR10, CIFAR100
    except Exception:  # not installed, or a build that does not match the installed torch
        return None
    base = CIFAR10 if name == "cifar10" else CIFAR100
    folder, tr_files, te_files, _ = CIFAR_LAYOUT[name]

    class _Local(base):
        def _check_integrity(self) -> bool:  # presence instead of torchvision's md5 of the full files
            return all((Path(self.root) / folder / f).is_file() for f in (tr_files if self.train else te_files))

        def _load_meta(self) -> None:  # class names are not used (and the meta file is md5-checked)
            self.classes, self.class_to_idx = [], {}

    ds = _Local(str(root), train=train, download=False)
    return np.asarray(ds.data).transpose(0, 3, 1, 2), np.asarray(ds.targets, dtype=np.int64)


def _cifar_pickles(name: str, root: Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """The same files read directly: (x (N, 3, 32, 32) uint8, y (N,) int64).

    The batches are Python pickles (the format CIFAR is distributed in); only read files you trust.
    """
    import pickle

    folder, tr_files, te_files, key = CIFAR_LAYOUT[name]
    xs, ys = [], []
    for f in tr_files if train else te_files:
        path = root / folder / f
        if not path.is_file():
            raise ValueError(f"{root}: missing {folder}/{f} (the CIFAR python-version layout)")
        with open(path, "rb") as fh:
            entry = pickle.load(fh, encoding="latin1")
        if "data" not in entry or key not in entry:
            raise ValueError(f"{path}: expected keys 'data' and '{key}', got {sorted(entry)}")
        xs.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(entry[key], dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


def load_cifar(
    root: str | Path,
    n_tasks: int,
    seed: int = 0,
    permute_classes: bool = True,
    name: str | None = None,
    use_torchvision: bool = True,
    trust_pickles: bool = False,
) -> ContinualData:
    """Seq-CIFAR-10/100 from the distributed files (nothing is downloaded).

    The distributed "python version" batches are pickles, and unpickling can run code: nothing is read
    unless ``trust_pickles=True`` (``--set data.trust_pickles=true``), a ValueError saying so otherwise.
    Pass it only for files you trust (e.g. checked against the official md5 sums).

    Read through torchvision's ``CIFAR10``/``CIFAR100`` classes (``download=False``) when torchvision
    imports, else directly from the same pickle batches. Inputs are float (N, 3, 32, 32), scaled to
    [0, 1] and normalised with the dataset's standard per-channel mean/std; class order is permuted
    by the seed (official ``--permute_classes=1``) and split into ``n_tasks`` equal tasks.
    """
    found = find_cifar(root)
    if found is None:
        raise ValueError(f"{root}: no cifar-10-batches-py/ or cifar-100-python/ folder")
    which, base = found
    if name is not None and name != which:
        raise ValueError(f"{root}: holds {which}, not {name}")
    if not trust_pickles:
        raise ValueError(
            f"{root}: the {which} python batches are pickles, which can run code when loaded; pass "
            "trust_pickles=True (iclr26 run: --set data.trust_pickles=true) only for files you trust"
        )
    arrays = {}
    for train in (True, False):
        got = _cifar_torchvision(which, base, train) if use_torchvision else None
        arrays[train] = got if got is not None else _cifar_pickles(which, base, train)
    (x_tr, y_tr), (x_te, y_te) = arrays[True], arrays[False]
    mean, std = (np.asarray(v, dtype=np.float32).reshape(1, 3, 1, 1) for v in CIFAR_MEAN_STD[which])
    x_tr = (x_tr.astype(np.float32) / 255.0 - mean) / std
    x_te = (x_te.astype(np.float32) / 255.0 - mean) / std
    classes = np.unique(y_tr)
    order = np.random.default_rng(seed).permutation(classes) if permute_classes else classes
    return _tasks_from_labels(x_tr, y_tr, x_te, y_te, n_tasks, order, which)
