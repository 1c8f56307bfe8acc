"""The ScenarioNet reader treats files as untrusted: no unpickling without ``trust_pickles=True``, and then
only the files the dataset index lists, inside the dataset folder. A pickle that would create a marker
folder when unpickled shows whether anything was unpickled that should not have been."""

import os
import pickle

import pytest

from iclr26.infgen.scenarionet import load_scenarios, scenario_files


class Payload:
    """Unpickling this creates ``marker`` (a harmless stand-in for arbitrary code)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _dump(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def _scenario(i):
    return {"id": f"s{i}", "tracks": {}, "map_features": {}, "metadata": {"sdc_id": None}}


def _dataset(root, entries, mapping=None):
    """``entries``: file name -> object written at ``root/mapping[name]/name``; the index lists them all."""
    mapping = mapping if mapping is not None else {n: "" for n in entries}
    for name, obj in entries.items():
        if obj is not None:
            _dump(root / mapping.get(name, "") / name, obj)
    _dump(root / "dataset_summary.pkl", {n: {"id": n} for n in entries})
    _dump(root / "dataset_mapping.pkl", mapping)
    return root


def test_no_unpickling_without_the_trust_option(tmp_path):
    marker = tmp_path / "ran"
    db = _dataset(tmp_path / "db", {"sd_0.pkl": Payload(marker)})
    _dump(db / "dataset_summary.pkl", {"sd_0.pkl": Payload(marker)})  # even the index is not read
    with pytest.raises(ValueError, match="trust_pickles=True") as e:
        load_scenarios(db)
    assert "arbitrary code" in str(e.value) and not marker.exists()


def test_only_listed_files_are_unpickled(tmp_path):
    marker = tmp_path / "ran"
    db = _dataset(tmp_path / "db", {"sd_0.pkl": _scenario(0), "sd_1.pkl": _scenario(1)})
    _dump(db / "sd_unlisted.pkl", Payload(marker))
    _dump(db / "sub" / "sd_2.pkl", Payload(marker))
    _dump(db / "dataset_extra.pkl", Payload(marker))
    got = load_scenarios(db, trust_pickles=True)
    assert [s["id"] for s in got] == ["s0", "s1"] and not marker.exists()
    # the limit stops before a listed file is read
    _dataset(tmp_path / "db2", {"sd_0.pkl": _scenario(0), "sd_1.pkl": Payload(marker)})
    assert len(load_scenarios(tmp_path / "db2", 1, trust_pickles=True)) == 1 and not marker.exists()


def test_mapping_and_symlinks_that_leave_the_dataset_are_refused(tmp_path):
    marker = tmp_path / "ran"
    outside = tmp_path / "elsewhere"
    _dump(outside / "sd_0.pkl", Payload(marker))
    db = _dataset(tmp_path / "db", {"sd_0.pkl": None}, mapping={"sd_0.pkl": "../elsewhere"})
    with pytest.raises(ValueError, match=r"dataset_mapping.pkl: entry 'sd_0.pkl'.*outside the dataset folder"):
        load_scenarios(db, trust_pickles=True)
    assert not marker.exists()
    db2 = _dataset(tmp_path / "db2", {"sd_0.pkl": None})
    (db2 / "sd_0.pkl").symlink_to(outside / "sd_0.pkl")
    with pytest.raises(ValueError, match="outside the dataset folder"):
        load_scenarios(db2, trust_pickles=True)
    assert not marker.exists()
    # a merged dataset may name its source folders explicitly
    src = tmp_path / "waymo"
    _dump(src / "sd_w.pkl", _scenario(7))
    merged = _dataset(tmp_path / "merged", {"sd_w.pkl": None}, mapping={"sd_w.pkl": "../waymo"})
    with pytest.raises(ValueError, match="allowed_roots"):
        load_scenarios(merged, trust_pickles=True)
    assert load_scenarios(merged, trust_pickles=True, allowed_roots=(src,))[0]["id"] == "s7"


@pytest.mark.parametrize("name", ["../sd_0.pkl", "sub/sd_0.pkl", "sd_0.txt", "dataset_summary.pkl", 7, "..", ""])
def test_index_entries_must_be_bare_scenario_file_names(tmp_path, name):
    db = tmp_path / "db"
    _dump(db / "sd_0.pkl", _scenario(0))
    _dump(db / "dataset_summary.pkl", {name: {}})
    with pytest.raises(ValueError, match="dataset_summary.pkl: entry .* is not a bare scenario file name"):
        scenario_files(db, trust_pickles=True)


def test_malformed_datasets_name_the_file_and_entry(tmp_path):
    db = _dataset(tmp_path / "a", {"sd_0.pkl": _scenario(0), "sd_1.pkl": None})
    with pytest.raises(ValueError, match=r"entry 'sd_1.pkl': listed file .* does not exist"):
        load_scenarios(db, trust_pickles=True)
    db = _dataset(tmp_path / "b", {"sd_0.pkl": {"not": "a scenario"}})
    with pytest.raises(ValueError, match=r"sd_0.pkl: listed in the index but not a ScenarioNet scenario"):
        load_scenarios(db, trust_pickles=True)
    db = _dataset(tmp_path / "c", {"sd_0.pkl": _scenario(0)})
    (db / "sd_0.pkl").write_bytes(b"\x80\x04garbage")
    with pytest.raises(ValueError, match=r"sd_0.pkl: not a readable scenario pickle"):
        load_scenarios(db, trust_pickles=True)
    (db / "dataset_summary.pkl").write_bytes(b"\x80\x04\x95")
    with pytest.raises(ValueError, match=r"dataset_summary.pkl: not a readable pickle"):
        load_scenarios(db, trust_pickles=True)
    _dump(db / "dataset_summary.pkl", {})
    with pytest.raises(ValueError, match=r"dataset_summary.pkl: expected a non-empty dict"):
        load_scenarios(db, trust_pickles=True)
    db = _dataset(tmp_path / "d", {"sd_0.pkl": _scenario(0)})
    _dump(db / "dataset_mapping.pkl", {"sd_0.pkl": 3})
    with pytest.raises(ValueError, match=r"dataset_mapping.pkl: entry 'sd_0.pkl': folder 3"):
        load_scenarios(db, trust_pickles=True)
    with pytest.raises(ValueError, match="not a folder"):
        load_scenarios(db / "sd_0.pkl", trust_pickles=True)


def test_no_mapping_file_means_files_next_to_the_summary(tmp_path):
    db = _dataset(tmp_path / "db", {"sd_0.pkl": _scenario(0)})
    (db / "dataset_mapping.pkl").unlink()
    assert scenario_files(db, trust_pickles=True) == [db / "sd_0.pkl"]
