"""A full disk, through the ``skillog`` command: one line and exit 2, never a traceback,
and no partial or empty file left where the output was to go.

The full file system is a real one: a 64 KiB tmpfs mounted in a private mount namespace
(``unshare -m``, so it vanishes with the shell even if the test dies) and filled up.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SKILLOG = str(Path(sys.executable).parent / "skillog")
DEMO_SKILLS = Path(__file__).parents[2] / "orchestrator" / "demo" / "skills"


def skillog(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SKILLOG, *map(str, args)], cwd=cwd, capture_output=True, text=True, check=False
    )


def _can_mount_tmpfs() -> bool:
    probe = ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"]
    try:
        return subprocess.run(probe, capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


needs_tmpfs = pytest.mark.skipif(
    not _can_mount_tmpfs(), reason="needs unshare -m and mount -t tmpfs (root)"
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """A demo log, its session and a checkpoint key."""
    tmp = tmp_path_factory.mktemp("demo")
    run = skillog("demo", "--db", "skillog.db", cwd=tmp)
    assert run.returncode == 0, run.stderr
    session = run.stdout.split("skillog replay ")[1].split()[0]
    assert skillog("log", "keygen", "--out", tmp / "key").returncode == 0
    return tmp / "skillog.db", session, tmp / "key"


def on_full_disk(
    disk: Path, command: list[str | Path], *, before: str = "", room: int = 0, size: int = 64
) -> tuple[int, str]:
    """Run ``command`` with a ``size`` KiB tmpfs at ``disk`` that ``before`` (shell) prepares
    and a filler then fills but for ``room`` KiB; returns the exit code and stderr. What is
    left on the disk (every file and directory, with sizes) is listed to ``disk/../left``."""
    disk.mkdir()
    d = shlex.quote(str(disk))
    script = (
        f"set -e; mount -t tmpfs -o size={size}k tmpfs {d}; cd {d}; {before}\n"
        f"dd if=/dev/zero of=fill bs=1k 2>/dev/null || true; truncate -s -{room}K fill\n"
        f"set +e; {shlex.join(map(str, command))}; rc=$?\n"
        r"find . -mindepth 1 \( -type d -printf '%P/ 0\n' \) -o -printf '%P %s\n' "
        f"> {shlex.quote(str(disk.parent / 'left'))}; exit $rc"
    )
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)
    return out.returncode, out.stderr


def left(disk: Path) -> dict[str, int]:
    """The files left on the full disk (but the filler), with their sizes."""
    lines = (disk.parent / "left").read_text().splitlines()
    return {n: int(s) for n, s in (line.rsplit(" ", 1) for line in lines) if n != "fill"}


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@needs_tmpfs
# export and html get room for part of their output: the partial file must not stay.
@pytest.mark.parametrize(
    ("command", "room"), [("export", 16), ("html", 16), ("checkpoint", 0), ("keygen", 0)]
)
def test_a_write_to_a_full_disk_is_one_line_and_leaves_nothing(
    demo: tuple[Path, str, Path], tmp_path: Path, command: str, room: int
) -> None:
    db, session, key = demo
    disk = tmp_path / "disk"
    out = disk / "out"
    what, option, args = {
        "export": ("export file", "--out", ["log", "export", "--db", db, "--out", out]),
        "checkpoint": (
            "checkpoint file",
            "--out",
            ["log", "checkpoint", "--db", db, "--key", key, "--out", out],
        ),
        "html": ("report", "--html", ["replay", session, "--db", db, "--html", out]),
        "keygen": ("key file", "--out", ["log", "keygen", "--out", out]),
    }[command]
    code, err = on_full_disk(disk, [SKILLOG, *args], room=room)
    line = one_line(err)
    assert code == 2, err
    assert line.endswith(
        f"{what} {out}: cannot write: no space left on device: free space or choose another "
        f"{option}"
    ), line
    assert left(disk) == {}


@needs_tmpfs
@pytest.mark.parametrize("command", ["snapshot", "import", "demo"])
def test_a_database_written_to_a_full_disk_is_one_line_and_leaves_nothing(
    demo: tuple[Path, str, Path], tmp_path: Path, command: str
) -> None:
    db, _, _ = demo
    export = tmp_path / "x.jsonl"
    assert skillog("log", "export", "--db", db, "--out", export).returncode == 0
    disk = tmp_path / "disk"
    new = disk / "new.db"
    args, expected = {
        "snapshot": (
            ["log", "snapshot", new, "--db", db],
            f"snapshot {new}: cannot write: no space left on device: free space or choose "
            "another OUT.db",
        ),
        # SQLite reports SQLITE_FULL or, for its -wal and -shm, an I/O error: either way
        # the message says the disk is full and to free space.
        "import": (["log", "import", export, "--db", new], "is full"),
        "demo": (["demo", "--db", new], "is full"),
    }[command]
    code, err = on_full_disk(disk, [SKILLOG, *args], room=16)
    line = one_line(err)
    assert code == 2 and expected in line and "free space" in line, err
    assert left(disk) == {}  # no copy, no empty database, no -wal or -journal


@needs_tmpfs
def test_skills_on_a_full_disk_say_so(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(DEMO_SKILLS, project / ".agents" / "skills")
    disk = tmp_path / "disk"
    skills = [SKILLOG, "skills", "--project", project]
    # The skills index lives in the database (here ./skillog.db on the full disk).
    code, err = on_full_disk(disk, [*skills, "list"])
    line = one_line(err)
    assert code == 2 and "the disk holding it is likely full" in line, err
    assert "--no-index" in line and "delete" not in line
    code, err = on_full_disk(
        tmp_path / "disk2", [*skills, "--no-index", "materialize", "--to", "skills"], room=4
    )
    line = one_line(err)
    assert code == 2 and "cannot write the skill to skills/" in line, err
    assert line.endswith("no space left on device: free space or choose another directory")
    assert left(tmp_path / "disk2") in ({}, {"skills/": 0})  # no skill, whole or in part
    disk = tmp_path / "disk3"
    home = [f"XDG_DATA_HOME={disk / 'data'}", f"XDG_CONFIG_HOME={disk / 'config'}"]
    source = project / ".agents" / "skills" / "csv-insights"
    code, err = on_full_disk(disk, ["env", *home, *skills, "install", source], room=8)
    line = one_line(err)
    assert code == 2 and f"could not install {source}: no space left on device" in line, err
    assert "free space or choose another skills.install_dir in the configuration" in line
    assert all(name.endswith("/") for name in left(disk)), left(disk)  # no file, no staging


@needs_tmpfs
def test_a_checkpoint_that_does_not_fit_leaves_the_chain_as_it_was(
    demo: tuple[Path, str, Path], tmp_path: Path
) -> None:
    db, _, key = demo
    chain = tmp_path / "chain.jsonl"
    assert skillog("log", "checkpoint", "--db", db, "--key", key, "--out", chain).returncode == 0
    disk = tmp_path / "disk"
    size = chain.stat().st_size
    code, err = on_full_disk(
        disk,
        [SKILLOG, "log", "checkpoint", "--db", db, "--key", key, "--out", disk / "chain.jsonl"],
        before=f"cp {shlex.quote(str(chain))} chain.jsonl",
    )
    assert code == 2 and "no space left on device" in one_line(err)
    assert left(disk) == {"chain.jsonl": size}  # the old chain, whole; no temporary


@needs_tmpfs
def test_a_read_command_on_a_full_disk_says_what_is_wrong_and_what_to_do(
    demo: tuple[Path, str, Path], tmp_path: Path
) -> None:
    db, _, _ = demo
    # The log lies on a disk with no room for SQLite's -shm file, which even a reader needs.
    disk = tmp_path / "disk"
    code, err = on_full_disk(
        disk,
        [SKILLOG, "log", "verify", "--db", disk / "skillog.db"],
        before=f"cp {shlex.quote(str(db))} skillog.db",
        size=256,
    )
    line = one_line(err)
    assert code == 2, err
    assert "the disk holding the database is full" in line, line
    assert line.endswith(
        "which even a reader needs); free space on that disk (to read the log now, copy it "
        "with its -wal to another disk)"
    ), line


@pytest.mark.parametrize("command", ["export", "export-stdout", "html", "checkpoint"])
def test_dev_full_is_written_directly_and_fails_cleanly(
    demo: tuple[Path, str, Path], command: str
) -> None:
    db, session, key = demo
    if command == "export-stdout":
        with open("/dev/full", "w") as full:
            run = subprocess.run(
                [SKILLOG, "log", "export", "--db", str(db)],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                check=False,
            )
        assert run.returncode == 2
        assert one_line(run.stderr).endswith(
            "export file (standard output): cannot write: no space left on device: free "
            "space or choose another destination"
        )
        return
    args, expected = {
        "export": (
            ["log", "export", "--db", db, "--out", "/dev/full"],
            "export file /dev/full: cannot write: no space left on device: free space or "
            "choose another --out",
        ),
        "html": (
            ["replay", session, "--db", db, "--html", "/dev/full"],
            "report /dev/full: cannot write: no space left on device: free space or choose "
            "another --html",
        ),
        "checkpoint": (  # a chain is read back before it is extended: a device is no file
            ["log", "checkpoint", "--db", db, "--key", key, "--out", "/dev/full"],
            "checkpoint file /dev/full: not a regular file; the chain in it is read back and "
            "extended, so --out must name a regular file",
        ),
    }[command]
    run = skillog(*args)
    assert run.returncode == 2
    assert one_line(run.stderr).endswith(expected), run.stderr
