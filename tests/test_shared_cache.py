"""A cache folder shared by two users, each a real account running the CLI (this test's user and ``nobody``,
the second run as that user by the system): a colleague's answers are used, never asked again, whether the
folder is theirs alone (read only: nothing stored, said) or writable by a group both share (their new answers
stored for the other)."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_user_trust import answering_server, refusing_server, write_csv

OTHER = "nobody"
AS_OTHER = {"user": OTHER, "group": pwd.getpwnam(OTHER).pw_gid, "extra_groups": []}  # as a login would
HEADER = ["代码", "名称", "行业", "市盈率TTM", "ROE(%)"]
ROWS = [("600001", "甲", "光伏", "20", "12"), ("600002", "乙", "光伏", "30", "8")]


def _python_for_another_user() -> str | None:
    """An interpreter of this one's version that another account may run (this one may sit in root's home)."""
    for candidate in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if not candidate:
            continue
        try:
            probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"], **AS_OTHER,
                                   capture_output=True, text=True)
        except OSError:  # not this user's to run
            continue
        if probe.returncode == 0 and probe.stdout.strip() == str(tuple(sys.version_info[:2])):
            return candidate
    return None


@pytest.fixture
def two_users():
    """(a folder both users may enter, the other user's command prefix as a function of its env), or skip."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs to run as root, to start a run as a second user")
    python = _python_for_another_user()
    if python is None:
        pytest.skip(f"no interpreter of this version that {OTHER} may run")
    base = Path(tempfile.mkdtemp(prefix="xladdin-shared-", dir="/tmp"))
    base.chmod(0o777)
    paths = os.pathsep.join([str(Path(__file__).resolve().parents[1]), *site.getsitepackages()])
    probe = subprocess.run([python, "-c", "import xladdin.cli.main"], **AS_OTHER, capture_output=True,
                           env={"PYTHONPATH": paths, "HOME": str(base)}, text=True)
    if probe.returncode != 0:
        shutil.rmtree(base)
        pytest.skip(f"{OTHER} cannot import this checkout: {probe.stderr.strip()[-200:]}")

    def run_as_other(*args: str, cache: Path, engine: str) -> subprocess.CompletedProcess:
        env = {"PYTHONPATH": paths, "HOME": str(base), "XDG_CONFIG_HOME": str(base / "config"),
               "XDG_CACHE_HOME": str(base / "xdg"), "XLADDIN_CACHE_DIR": str(cache),
               "XLADDIN_ENGINE_URL": engine, "XLADDIN_RETRIES": "0", "PATH": os.environ.get("PATH", "")}
        return subprocess.run([python, "-m", "xladdin.cli.main", *args], **AS_OTHER, env=env, cwd=base,
                              capture_output=True, text=True, timeout=300)

    yield base, run_as_other
    shutil.rmtree(base, ignore_errors=True)


def run_as_me(*args: str, cache: Path, engine: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XLADDIN_CACHE_DIR": str(cache), "XLADDIN_ENGINE_URL": engine, "XLADDIN_RETRIES": "0"}
    return subprocess.run([sys.executable, "-m", "xladdin.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def chats(server) -> int:
    return sum(1 for h in server.hits if h.endswith("/chat/completions"))


def screened(who, pool: Path, out: Path, cache: Path, server) -> tuple[subprocess.CompletedProcess, int]:
    """``xladdin screen POOL -o OUT`` run by ``who`` (``run_as_me``, or the other user's) against ``server``,
    closed after: the run, and how many rows the server was asked."""
    try:
        run = who("screen", str(pool), "-o", str(out), "--no-progress", cache=cache, engine=server.url)
    finally:
        server.close()
    return run, chats(server)


def test_a_colleague_reads_a_cache_they_may_not_write_and_asks_nothing_again(two_users):
    base, run_as_other = two_users
    pool = write_csv(base / "pool.csv", HEADER, ROWS)
    pool.chmod(0o644)
    cache = base / "mine"  # made by this user's run: 0755, files 0644 for the other
    r, asked = screened(run_as_me, pool, base / "me.xlsx", cache, answering_server())
    assert r.returncode == 0 and asked == 2, r.stderr

    # every row asked would be 模型未作答: none may be asked
    r, asked = screened(run_as_other, pool, base / "theirs.xlsx", cache, refusing_server())
    assert r.returncode == 0, r.stderr
    assert asked == 0, "a row the colleague's cache holds was asked again"
    assert "2 rows, 2 from cache" in r.stdout + r.stderr
    assert "read only" in r.stdout + r.stderr

    r = run_as_other("cache", "clear", cache=cache, engine="http://127.0.0.1:9/v1")
    assert r.returncode == 2 and "read only for this user" in r.stderr
    r = run_as_me("cache", "stats", cache=cache, engine="http://127.0.0.1:9/v1")
    assert r.returncode == 0 and '"entries": 2' in r.stdout, "the colleague's clear removed entries"


def test_in_a_folder_shared_by_a_group_each_user_stores_answers_for_the_other(two_users):
    base, run_as_other = two_users
    group = grp.getgrgid(AS_OTHER["group"]).gr_name
    cache = base / "team"
    cache.mkdir()
    shutil.chown(cache, group=group)
    cache.chmod(0o2775)  # as the docs say: the group may write, files made in it are the group's
    first = write_csv(base / "first.csv", HEADER, ROWS[:1])
    both = write_csv(base / "both.csv", HEADER, ROWS)
    for p in (first, both):
        p.chmod(0o644)
    r, _ = screened(run_as_me, first, base / "a.xlsx", cache, answering_server())
    assert r.returncode == 0, r.stderr

    r, asked = screened(run_as_other, both, base / "b.xlsx", cache, answering_server())
    assert r.returncode == 0, r.stderr
    assert asked == 1, "the row this user's run had answered was asked again"
    assert "read only" not in r.stdout + r.stderr

    r, asked = screened(run_as_me, both, base / "c.xlsx", cache, refusing_server())
    assert r.returncode == 0, r.stderr
    assert asked == 0, "the colleague's answer was not stored for this user"
    assert "2 rows, 2 from cache" in r.stdout + r.stderr
