"""Test modules load by file name (test folders have no __init__.py): two files with one name in different
folders stop the whole run with an 'import file mismatch'. Every test file name is unique."""

from collections import Counter
from pathlib import Path


def test_test_file_names_are_unique():
    names = Counter(p.name for p in Path(__file__).parent.rglob("test_*.py"))
    assert [n for n, k in names.items() if k > 1] == []
