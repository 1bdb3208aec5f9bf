"""Permissions (issue 6): streams are 0600 whatever the umask; another user cannot open, stat or
unlink a 0600 stream (PermissionError naming the path); ``permissions=0o660`` with a shared group lets
a group member read and write, and nobody else in.

The multi-user tests need root (they create two users and a group with useradd/groupadd and
remove them afterwards) and are skipped otherwise. Each user's side runs in a child process
that drops to that user (setgroups/setgid/setuid) before touching the stream.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, List

import numpy as np
import pytest

import framebus
from reliability_helpers import ctx, unique_name, unlink_quietly

FRAME = np.arange(12, dtype=np.uint8).reshape(3, 4)


def _mode(name: str) -> int:
    return os.stat(f"/dev/shm/framebus.{name}").st_mode & 0o7777


@pytest.mark.parametrize("umask", [0, 0o022, 0o077, 0o777])
def test_default_mode_is_0600_whatever_the_umask(umask: int) -> None:
    name = unique_name("perm")
    old = os.umask(umask)
    try:
        with framebus.create(name, shape=(3, 4), dtype=np.uint8) as s:
            assert _mode(name) == 0o600
            s.unlink()
        with framebus.create(name, shape=(3, 4), dtype=np.uint8, permissions=0o640) as s:
            assert _mode(name) == 0o640
            s.unlink()
    finally:
        os.umask(old)
        unlink_quietly(name)


# -- a second user -------------------------------------------------------------------------------


def _as_user(uid: int, gid: int, groups: List[int], code: str, name: str, q: Any) -> None:
    import warnings

    warnings.simplefilter("ignore")
    os.setgroups(groups)
    os.setgid(gid)
    os.setuid(uid)
    ns = {"framebus": framebus, "np": np, "name": name, "FRAME": FRAME, "q": q}
    try:
        exec(code, ns)
        q.put(("ok", ns.get("result"), ""))
    except BaseException as exc:  # noqa: BLE001 - reported
        q.put(("raised", [c.__name__ for c in type(exc).__mro__], str(exc)))


class Users:
    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}{os.urandom(2).hex()}"
        self.group = f"fbg{tag}"
        self.names = [f"fb{tag}{x}" for x in "abc"]
        self.created: List[str] = []

    def __enter__(self) -> "Users":
        run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
        run("groupadd", self.group)
        self.created.append("group")
        for n in self.names:
            run("useradd", "-M", "-N", "-g", "nogroup" if _has_group("nogroup") else self.group, "-s", "/usr/sbin/nologin", n)
            self.created.append(n)
        import grp
        import pwd

        self.gid = grp.getgrnam(self.group).gr_gid
        self.uids = [pwd.getpwnam(n).pw_uid for n in self.names]
        return self

    def __exit__(self, *exc: object) -> None:
        for n in self.names:
            if n in self.created:
                subprocess.run(["userdel", n], capture_output=True)
        if "group" in self.created:
            subprocess.run(["groupdel", self.group], capture_output=True)

    def run(self, who: int, code: str, name: str, in_group: bool, primary_group: bool = False, wait: bool = True) -> Any:
        c = ctx()
        q = c.SimpleQueue()
        import pwd

        base_gid = pwd.getpwuid(self.uids[who]).pw_gid
        gid = self.gid if primary_group else base_gid
        groups = [self.gid] if in_group else []
        p = c.Process(target=_as_user, args=(self.uids[who], gid, groups, code, name, q), daemon=True)
        p.start()
        if not wait:
            return p, q
        p.join(60)
        assert p.exitcode == 0, f"user child exit code {p.exitcode}"
        return q.get()


def _has_group(g: str) -> bool:
    import grp

    try:
        grp.getgrnam(g)
        return True
    except KeyError:
        return False


@pytest.fixture(scope="module")
def users():
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second user")
    if not (shutil.which("useradd") and shutil.which("groupadd")):
        pytest.skip("useradd/groupadd not available")
    try:
        with Users() as u:
            yield u
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create test users: {exc.stderr.decode(errors='replace').strip()}")


CREATE_AND_HOLD = """
s = framebus.create(name, shape=(3, 4), dtype=np.uint8, permissions={mode})
s.write(FRAME, frame_id=1, meta=b'owner')
q.put(("created", None, ""))
import time
time.sleep(3600)
"""


def _owner_stream(users: Users, mode: str) -> tuple:
    name = unique_name("perm")
    p, q = users.run(0, CREATE_AND_HOLD.format(mode=mode), name, in_group=True, primary_group=True, wait=False)
    kind, _, msg = q.get()
    assert kind == "created", msg
    return name, p


def _stop(name: str, p: Any) -> None:
    p.kill()
    p.join()
    unlink_quietly(name)


def _denied(outcome: Any, name: str) -> None:
    kind, mro, msg = outcome
    assert kind == "raised", f"expected PermissionError, got success: {mro}"
    assert "PermissionError" in mro, f"{mro[0]}: {msg}"
    assert f"/dev/shm/framebus.{name}" in msg, msg


def test_other_user_cannot_open_a_0600_stream(users: Users) -> None:
    name, p = _owner_stream(users, "0o600")
    try:
        assert _mode(name) == 0o600
        st = os.stat(f"/dev/shm/framebus.{name}")
        assert st.st_uid == users.uids[0]
        for code in ["framebus.open(name)", "framebus.open(name, mode='lossless')", "framebus.open(name, readonly=True)", "framebus.stat(name)"]:
            _denied(users.run(1, code, name, in_group=True), name)
        # unlink is refused by the sticky /dev/shm: still a PermissionError, and the stream survives
        kind, mro, msg = users.run(1, "framebus.unlink(name)", name, in_group=True)
        assert kind == "raised" and "PermissionError" in mro, msg
        kind, result, _ = users.run(1, "result = [str(i) for i in framebus.list_streams()]", name, in_group=True)
        assert kind == "ok" and name not in result
        # the owner's stream is untouched
        with framebus.open(name) as s:
            pub = s.read_publication()
            assert pub.seq == 1 and pub.meta == b"owner" and np.array_equal(pub.payload, FRAME)
    finally:
        _stop(name, p)


def test_group_mode_0660_lets_group_members_in_and_nobody_else(users: Users) -> None:
    name, p = _owner_stream(users, "0o660")
    try:
        st = os.stat(f"/dev/shm/framebus.{name}")
        assert st.st_mode & 0o777 == 0o660 and st.st_gid == users.gid
        code = """
s = framebus.open(name, mode='lossless')
assert (s.read() == FRAME).all()
s.write(FRAME + 1, frame_id=2, meta=b'member')
result = (s.write_sequence, s.attached)
s.close()
"""
        kind, result, msg = users.run(1, code, name, in_group=True)
        assert kind == "ok", msg
        assert result[0] == 2
        _denied(users.run(2, "framebus.open(name)", name, in_group=False), name)
        with framebus.open(name) as s:
            pub = s.read_publication()
            assert pub.meta == b"member" and np.array_equal(pub.payload, FRAME + 1)
    finally:
        _stop(name, p)


def test_group_read_only_mode_0640_is_a_clear_permission_error(users: Users) -> None:
    """Attaching needs write access (reader entries live in the segment), so 0o640 lets a group
    member in nowhere: a clear PermissionError, not a crash or a half-open handle."""
    name, p = _owner_stream(users, "0o640")
    try:
        _denied(users.run(1, "framebus.open(name, readonly=True)", name, in_group=True), name)
    finally:
        _stop(name, p)
