"""Entries in /dev/shm named ``framebus.*`` that are no framebus stream: FIFOs, sockets,
directories and symbolic links (whatever they point to), and files whose name is not a valid
stream name. ``framebus gc`` never removes them, with or without ``--unreadable`` (nor does
``framebus.unlink``, nor ``gc_zenoh`` a link named ``*.zenoh``); ``ls`` and ``doctor`` list them
as no stream; ``gc`` says it leaves them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid

import pytest

import framebus
from framebus import info

from conftest import SHM, segment_path
from test_cli import run_cli

#: Old enough that gc would treat a segment that is "not initialised yet" as abandoned.
LONG_AGO = time.time() - 3600


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


@pytest.fixture
def odd(name, tmp_path, spawn):
    """Makes entries ``framebus.<name>.<kind>`` that are no segments, and a real stale segment
    kept outside the framebus names, which a link points at. Yields {kind: stream name} and the
    targets; removes everything afterwards."""
    made = {k: f"{name}.{k}" for k in ("fifo", "sock", "dir", "link-seg", "link-file")}
    target_seg = f"{SHM}/h1-target-{uuid.uuid4().hex}"  # no framebus name: gc never looks at it
    target_file = str(tmp_path / "regular")
    sock = socket.socket(socket.AF_UNIX)
    try:
        # A real stale segment (its creator, a child, has exited), moved out of the framebus names.
        child = spawn(f"framebus.create({name + '.seg'!r}, shape=(4,)).close()\nsay('created')")
        child.expect("created")
        child.finish()
        assert framebus.stat(f"{name}.seg").stale
        os.rename(segment_path(f"{name}.seg"), target_seg)
        with open(target_file, "w") as f:
            f.write("not yours")
        os.mkfifo(segment_path(made["fifo"]))
        sock.bind(segment_path(made["sock"]))
        os.mkdir(segment_path(made["dir"]))
        os.symlink(target_seg, segment_path(made["link-seg"]))
        os.symlink(target_file, segment_path(made["link-file"]))
        for stream in made.values():
            os.utime(segment_path(stream), (LONG_AGO, LONG_AGO), follow_symlinks=False)
        yield made, target_seg, target_file
    finally:
        sock.close()
        for stream in made.values():
            _remove(segment_path(stream))
        _remove(target_seg)


def _all_there(made, target_seg, target_file):
    for kind, stream in made.items():
        assert os.path.lexists(segment_path(stream)), f"the {kind} was removed"
    assert os.path.isfile(target_seg), "the segment a link points at was removed"
    assert os.path.isfile(target_file), "the file a link points at was removed"


@pytest.mark.parametrize("unreadable", [False, True], ids=["plain", "unreadable"])
def test_gc_removes_no_fifo_socket_directory_or_symlink(odd, unreadable):
    made, target_seg, target_file = odd
    for dry_run in (True, False):
        removed = framebus.gc(dry_run=dry_run, unreadable=unreadable)
        assert not set(made.values()) & set(removed), removed
    _all_there(made, target_seg, target_file)
    args = ["gc", "--unreadable"] if unreadable else ["gc"]
    p = run_cli(*args)
    assert p.returncode == 0, p.stderr
    for kind, stream in made.items():
        assert f"removed {stream}\n" not in p.stdout
        assert f"left {SHM}/framebus.{stream}: not a framebus segment" in p.stdout, p.stdout
    assert f"left {SHM}/framebus." + made["fifo"] + ": not a framebus segment: a FIFO" in p.stdout
    _all_there(made, target_seg, target_file)


def test_framebus_refuses_to_open_or_unlink_what_is_no_segment(odd):
    made, target_seg, target_file = odd
    for kind, stream in made.items():
        with pytest.raises(framebus.errors.CorruptStreamError, match="not a framebus segment"):
            framebus.open(stream)
        with pytest.raises(framebus.errors.CorruptStreamError, match="not a framebus segment"):
            framebus.unlink(stream)
        with pytest.raises(framebus.errors.CorruptStreamError, match="not a framebus segment"):
            framebus.stat(stream)
    assert not set(made.values()) & {str(i) for i in framebus.list_streams()}
    _all_there(made, target_seg, target_file)


def test_ls_and_doctor_list_them_as_no_stream(odd):
    made, _, _ = odd
    p = run_cli("ls", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["name"]: r for r in json.loads(p.stdout)}
    want = {"fifo": "a FIFO", "sock": "a socket", "dir": "a directory", "link-seg": "a symbolic link", "link-file": "a symbolic link"}
    for kind, stream in made.items():
        assert rows[stream]["writer"] == "not a stream"
        assert rows[stream]["problem"].startswith(f"not a framebus segment: {want[kind]}")
    p = run_cli("ls")
    assert p.returncode == 0 and made["fifo"] in p.stdout and "not a framebus segment: a FIFO" in p.stdout
    p = run_cli("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(p.stdout)["checks"]}
    assert made["sock"] in checks["not framebus streams"]["detail"]


def test_a_file_with_a_bad_stream_name_is_listed_and_left_alone(name):
    path = f"{SHM}/framebus.{name} bad name"
    with open(path, "w"):
        pass
    os.utime(path, (LONG_AGO, LONG_AGO))
    try:
        p = run_cli("ls", "--json")
        row = {r["path"]: r for r in json.loads(p.stdout)}[path]
        assert row["writer"] == "not a stream" and row["problem"] == "not a framebus stream name"
        p = run_cli("ls")
        assert f"{name} bad name" in p.stdout and "not a framebus stream name" in p.stdout
        p = run_cli("doctor", "--json")
        checks = {c["name"]: c for c in json.loads(p.stdout)["checks"]}
        assert "not a framebus stream name" in checks["not framebus streams"]["detail"]
        for args in (["gc"], ["gc", "--unreadable"]):
            p = run_cli(*args)
            assert p.returncode == 0, p.stderr
            assert f"left {SHM}/framebus.{name} bad name: not a framebus stream name" in p.stdout, p.stdout
        assert os.path.isfile(path)
    finally:
        _remove(path)


def test_gc_zenoh_follows_no_symlink(tmp_path):
    target = tmp_path / "segment.zenoh"
    target.write_bytes(b"\0" * 64)
    link = f"{info.ZENOH_SHM_DIR}/h1-{uuid.uuid4().hex}.zenoh"
    os.symlink(target, link)
    try:
        assert os.path.basename(link) not in info.gc_zenoh()
        assert os.path.islink(link) and target.is_file()
    finally:
        _remove(link)
    shutil.rmtree(tmp_path, ignore_errors=True)
