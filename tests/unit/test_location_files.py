"""Files written below a location (the run reports): whole at any size or not at all.

The same checks run on Blob storage (Azurite) in tests/storage/test_object_store.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from support.python_rules import local_location
from syphon.store.location import Location

MIB = 1 << 20

#: Sizes around the 1 MiB write buffer between a write and the object store's stream:
#: one byte below it, exactly it (a page of that size once failed with a TypeError), and
#: well past it.
PAGE_SIZES = [MIB - 1, MIB, 5 * MIB]


def page(size: int) -> bytes:
    """``size`` bytes that are not all the same (a piece written twice or left out shows)."""
    block = bytes(range(256)) * 4096  # 1 MiB
    return (block * (size // len(block) + 1))[:size]


@pytest.mark.parametrize("size", PAGE_SIZES)
def test_a_page_of_any_size_is_written_whole(tmp_path: Path, size: int) -> None:
    where = local_location(tmp_path)
    data = page(size)
    shown = where.write_bytes("reports/r-1.html", data)
    assert shown == str(tmp_path / "reports" / "r-1.html")
    assert (tmp_path / "reports" / "r-1.html").read_bytes() == data
    assert os.listdir(tmp_path / "reports") == ["r-1.html"]  # nothing beside it


def test_a_page_written_again_replaces_the_first(tmp_path: Path) -> None:
    where = local_location(tmp_path)
    where.write_bytes("reports/r-1.html", page(2 * MIB))
    where.write_bytes("reports/r-1.html", b"<p>shorter</p>")
    assert (tmp_path / "reports" / "r-1.html").read_bytes() == b"<p>shorter</p>"


class _BrokenStream:
    """A file object that takes ``budget`` bytes, then fails as a dropped connection."""

    closed = False

    def __init__(self, budget: int) -> None:
        self.budget = budget

    def write(self, data: Any) -> int:
        if len(data) > self.budget:
            raise ConnectionResetError("the connection dropped")
        self.budget -= len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class _Failing:
    """The location's file system, but with a stream that breaks mid-write or a move that
    fails."""

    def __init__(self, real: Any, fail_at: str) -> None:
        self.real, self.fail_at = real, fail_at

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def open_output_stream(self, path: str) -> Any:
        if self.fail_at == "write":
            self.real.open_output_stream(path).close()  # the object exists, empty
            return pa.PythonFile(_BrokenStream(MIB + 10), mode="w")
        return self.real.open_output_stream(path)

    def move(self, source: str, destination: str) -> None:
        if self.fail_at == "move":
            raise OSError("the move failed")
        self.real.move(source, destination)


@pytest.mark.parametrize("fail_at", ["write", "move"])
def test_a_write_that_fails_leaves_no_file_a_reader_could_take_for_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: str
) -> None:
    real = Location.filesystem
    monkeypatch.setattr(Location, "filesystem", lambda self: _Failing(real(self), fail_at))
    where = local_location(tmp_path)
    with pytest.raises((OSError, ConnectionResetError)):
        where.write_bytes("reports/r-1.html", page(3 * MIB))
    assert os.listdir(tmp_path / "reports") == []
