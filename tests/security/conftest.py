"""A second Unix user for the security tests: a throwaway account made with ``useradd``
(the tests run as root in CI; elsewhere they are skipped)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from _attack import User


@pytest.fixture(scope="session")
def mallory() -> Iterator[User]:
    """A second Unix user, made for this session and removed after it."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("making a second Unix user needs root and useradd (CI runs as root)")
    name = f"ftmal{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    try:
        entry = pwd.getpwnam(name)
        yield User(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)
