"""The stdlib byte corpus: deterministic, ordered, 95/5 split, identical batches across arms."""

import numpy as np
import pytest

from iclr26.mesh.data import ByteCorpus, stdlib_bytes, stdlib_documents, stdlib_source_files


def test_corpus_is_deterministic_sorted_and_split():
    a, b = stdlib_bytes(50_000), stdlib_bytes(50_000)
    assert a.dtype == np.uint8 and len(a) == 50_000 and np.array_equal(a, b)
    first_name, first = next(stdlib_documents())
    _, py = stdlib_source_files()
    assert first_name.startswith("pydoc:") and py == sorted(py) and len(py) > 100
    assert not any(part in ("test", "idlelib", "site-packages") for n in py for part in n.split("/")[:-1])
    assert bytes(a[: len(first)]) == first
    c = ByteCorpus.from_stdlib(50_000)
    assert len(c.train) == 47_500 and len(c.val) == 2_500
    assert np.array_equal(np.concatenate([c.train, c.val]), a)
    with pytest.raises(ValueError):
        stdlib_bytes(10)


def test_batches_are_a_function_of_seed_and_step_and_split_over_ranks():
    c = ByteCorpus.from_stdlib(20_000)
    x = c.train_batch(seed=0, step=3, batch=8, seq_len=16)
    assert x.shape == (8, 17) and int(x.max()) < 256
    assert np.array_equal(x.numpy(), c.train_batch(0, 3, 8, 16).numpy())
    assert not np.array_equal(x.numpy(), c.train_batch(1, 3, 8, 16).numpy())
    assert not np.array_equal(x.numpy(), c.train_batch(0, 4, 8, 16).numpy())
    parts = [c.train_batch(0, 3, 8, 16, rank=r, world=2).numpy() for r in range(2)]
    assert np.array_equal(np.concatenate(parts), x.numpy())
    with pytest.raises(ValueError):
        c.train_batch(0, 0, 7, 16, rank=0, world=2)
    vb = c.val_batches(seq_len=16, max_windows=10, batch=4)
    assert [b.shape[0] for b in vb] == [4, 4, 2]
    assert np.array_equal(vb[0][1, :].numpy(), c.val[16:33])
