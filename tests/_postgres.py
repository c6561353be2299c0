"""A throwaway PostgreSQL server for the test session: initdb + pg_ctl in a temporary
folder, a Unix socket only (no TCP port), stopped and removed afterwards.

PostgreSQL refuses to run as root; as root the server runs as the ``postgres`` user
through ``runuser``. The tests that need it skip, saying why, when no PostgreSQL
binaries are found (``PG_BIN`` names their folder; default: the newest under
``/usr/lib/postgresql``) or psycopg is not installed -- except in CI (``CI=true``,
as ``.ci/run`` sets), where a missing server fails the tests loudly: a skip is not
evidence.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def postgres_bin() -> Path | None:
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI: {reason}; the PostgreSQL tests must run in CI (see .ci/run)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_socket() -> Iterator[Path]:
    """The socket folder of a running throwaway server (user ``harness``, trust auth)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg 3 is not installed (pip install 'psycopg[binary]')")
    binaries = postgres_bin()
    if binaries is None or not (binaries / "initdb").exists():
        _unavailable("no PostgreSQL server binaries (initdb, pg_ctl); set PG_BIN")
    folder = Path(tempfile.mkdtemp(prefix="harness-pg-"))
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(folder, user.pw_uid, user.pw_gid)
    data = folder / "data"
    subprocess.run(
        _as_server_user(
            [str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "harness",
             "-E", "UTF8", "--no-sync"]
        ),
        check=True, capture_output=True,
    )  # fmt: skip
    options = f"-k {folder} -c listen_addresses='' -c fsync=off -c synchronous_commit=off"
    subprocess.run(
        _as_server_user(
            [str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l",
             str(folder / "server.log"), "-w", "start"]
        ),
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield folder
    finally:
        subprocess.run(
            _as_server_user([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            check=False, capture_output=True,
        )  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_socket: Path) -> Iterator[str]:
    """A fresh, empty database on the session's server, dropped afterwards."""
    import uuid

    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(host=str(postgres_socket), user="harness", dbname="postgres",
                         autocommit=True) as connection:  # fmt: skip
        connection.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql+psycopg://harness@/{name}?host={postgres_socket}"
    with psycopg.connect(host=str(postgres_socket), user="harness", dbname="postgres",
                         autocommit=True) as connection:  # fmt: skip
        connection.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def restart_postgres(socket: Path) -> None:
    """Stop the session's server (``-m fast``: every client's connection is cut, running
    transactions are rolled back) and start it again. Not ``immediate``: the test server
    runs with ``synchronous_commit=off``, so a crash could lose commits it had
    acknowledged -- true of that setting, not of the harness."""
    binaries = postgres_bin()
    data = socket / "data"
    subprocess.run(
        _as_server_user([str(binaries / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"]),
        check=True, capture_output=True,
    )  # fmt: skip
    options = f"-k {socket} -c listen_addresses='' -c fsync=off -c synchronous_commit=off"
    subprocess.run(
        _as_server_user(
            [str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l",
             str(socket / "server.log"), "-w", "start"]
        ),
        check=True, capture_output=True,
    )  # fmt: skip
