"""Scratch buffers for large run values (:mod:`simstore.engine.scratch`):
zeroed, writable, file-backed above the threshold, never left on disk, and
memory again when no file can be had."""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

import numpy as np
import pytest

from simstore.engine import columns, scratch


def test_small_values_are_bytearrays_and_large_ones_shared_maps_of_no_file(tmp_path: Path) -> None:
    small = scratch.value_buffer(100, str(tmp_path), threshold=101)
    assert isinstance(small, bytearray)
    assert small == bytearray(100)
    large = scratch.value_buffer(1 << 20, str(tmp_path), threshold=101)
    assert isinstance(large, mmap.mmap)
    assert len(large) == 1 << 20
    assert large[:] == bytes(1 << 20)
    # The scratch file has no name in the directory while it is used, nor after.
    assert os.listdir(tmp_path) == []
    view = np.frombuffer(large, dtype=np.uint64)
    view[:] = np.arange(len(view), dtype=np.uint64)
    assert int(np.frombuffer(large, dtype=np.uint64)[-1]) == len(view) - 1
    del view
    large.close()
    assert os.listdir(tmp_path) == []


def test_the_module_threshold_is_read_when_a_buffer_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make = scratch.in_directory_of(str(tmp_path / "store.simstore"))
    assert isinstance(make(4096), bytearray)
    monkeypatch.setattr(scratch, "SCRATCH_BYTES", 4096)
    assert isinstance(make(4096), mmap.mmap)
    assert isinstance(make(4095), bytearray)


def test_a_full_disk_or_a_missing_directory_gives_memory_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(scratch.value_buffer(4096, str(tmp_path / "gone"), threshold=0), bytearray)

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    value = scratch.value_buffer(4096, str(tmp_path), threshold=0)
    assert isinstance(value, bytearray)
    assert value == bytearray(4096)
    assert os.listdir(tmp_path) == []


def test_a_value_sealed_in_a_scratch_buffer_decodes_as_one_in_memory(tmp_path: Path) -> None:
    payload = np.arange(5000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    make = scratch.in_directory_of(str(tmp_path / "store.simstore"), threshold=0)
    in_scratch = columns.encode(columns.KEYS, payload, make=make)
    in_memory = columns.encode(columns.KEYS, payload)
    assert isinstance(in_scratch, mmap.mmap)
    assert bytes(in_scratch) == bytes(in_memory)
    decoded, _bits = columns.decode(in_scratch, columns.KEYS, verify=True)
    assert np.array_equal(decoded, payload)
    # A join that dropped entries copies what it filled into a value of that length.
    value, items = columns.allocate(10, 8, make)
    items[:] = np.arange(10, dtype=np.uint64)
    shorter = columns.seal_filled(value, columns.KEYS, items, 6, make)
    assert np.array_equal(columns.decode(shorter, columns.KEYS, verify=True)[0], np.arange(6))
