"""shared.credentials: the file's scrypt hashes, verification, the lockout and ``fixlab passwd``."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from shared import credentials
from shared.credentials import CredentialsError, Hashed, Lockout


def test_hash_is_salted_scrypt_and_verifies() -> None:
    one, two = credentials.hash_password("s3cret"), credentials.hash_password("s3cret")
    assert one.startswith("scrypt$16384$8$1$") and one != two  # a fresh salt each time
    assert Hashed.parse(one).matches("s3cret")
    assert not Hashed.parse(one).matches("s3creT")
    assert not Hashed.parse(one).matches("")


def test_hash_repr_hides_secrets() -> None:
    hashed = Hashed.parse(credentials.hash_password("pw"))
    assert hashed.salt.hex() not in repr(hashed) and "digest=" not in repr(hashed)


@pytest.mark.parametrize("bad", ["", "x" * 129, "a\x01b", "tab\there"])
def test_bad_passwords_refused(bad: str) -> None:
    with pytest.raises(CredentialsError):
        credentials.hash_password(bad)


@pytest.mark.parametrize("line", ["CLIENT01", "CLIENT01 md5$abc", "CLIENT01 scrypt$3$8$1$AA==$AA==",
                                  "CLIENT01 scrypt$16384$8$1$!!$AA==", "A B C"])
def test_malformed_lines_name_their_line(line: str) -> None:
    with pytest.raises(CredentialsError, match="line 2"):
        credentials.parse(["# comment", line])


def test_set_password_adds_replaces_and_keeps_others(tmp_path: Path) -> None:
    path = tmp_path / "creds"
    credentials.set_password(path, "CLIENT01", "one")
    credentials.set_password(path, "CLIENT02", "two")
    credentials.set_password(path, "CLIENT01", "uno")
    creds = credentials.load(path)
    assert creds.verify("CLIENT01", "uno") and not creds.verify("CLIENT01", "one")
    assert creds.verify("CLIENT02", "two")
    assert not creds.verify("CLIENT03", "two")  # no line: refused
    assert path.stat().st_mode & 0o777 == 0o600
    assert "uno" not in path.read_text()


def test_set_password_refuses_unknown_comp_id(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match="not a CompID"):
        credentials.set_password(tmp_path / "creds", "NOBODY", "pw")


def test_from_env(tmp_path: Path) -> None:
    assert credentials.from_env({}) is None
    with pytest.raises(CredentialsError, match="cannot read"):
        credentials.from_env({"FIXLAB_CREDENTIALS": str(tmp_path / "missing")})


def test_lockout_after_n_failures_in_window_then_expires() -> None:
    lock = Lockout(failures=3, window=10.0, duration=60.0)
    assert not lock.fail(0.0, "comp:CLIENT01", "addr:127.0.0.2")
    assert not lock.fail(1.0, "comp:CLIENT01", "addr:127.0.0.2")
    assert lock.fail(2.0, "comp:CLIENT01", "addr:127.0.0.2")
    assert lock.locked(50.0, "comp:CLIENT01") and lock.locked(50.0, "addr:127.0.0.2")
    assert not lock.locked(50.0, "comp:CLIENT02", "addr:127.0.0.3")
    assert not lock.locked(62.5, "comp:CLIENT01")


def test_lockout_failures_outside_window_do_not_add_up() -> None:
    lock = Lockout(failures=3, window=10.0, duration=60.0)
    for t in (0.0, 11.0, 22.0, 33.0):
        assert not lock.fail(t, "comp:CLIENT01")


def test_lockout_from_env() -> None:
    assert Lockout.from_env({}).failures == 5
    assert Lockout.from_env({"FIXLAB_LOCKOUT_FAILURES": "2"}).failures == 2
    with pytest.raises(CredentialsError):
        Lockout.from_env({"FIXLAB_LOCKOUT_WINDOW": "soon"})


def test_read_password_from_stdin() -> None:
    assert credentials.read_password(io.StringIO("pw with spaces\nrest\n")) == "pw with spaces"


def _passwd(args: list[str], stdin: str, env_file: str | None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin"}
    if env_file is not None:
        env["FIXLAB_CREDENTIALS"] = env_file
    code = "import sys; from services.cli import main; sys.exit(main(['passwd', *sys.argv[1:]]))"
    return subprocess.run([sys.executable, "-c", code, *args], input=stdin, capture_output=True,
                          text=True, env=env, timeout=60, check=False,
                          cwd=Path(__file__).resolve().parents[2])


def test_fixlab_passwd_reads_stdin(tmp_path: Path) -> None:
    path = tmp_path / "creds"
    done = _passwd(["CLIENT42-01"], "hunter22\n", str(path))
    assert done.returncode == 0, done.stderr
    assert credentials.load(path).verify("CLIENT42-01", "hunter22")
    assert "hunter22" not in done.stdout + done.stderr


@pytest.mark.parametrize(("args", "stdin", "env_set", "code"), [
    (["CLIENT01"], "\n", True, 1),          # empty password
    (["NOBODY"], "pw\n", True, 1),          # no pool has that CompID
    (["CLIENT01"], "pw\n", False, 2),       # no file named
    (["CLIENT01", "pw"], "", True, 2),      # never a password as an argument
])
def test_fixlab_passwd_bad_input_one_line(tmp_path: Path, args: list[str], stdin: str,
                                          env_set: bool, code: int) -> None:
    path = tmp_path / "creds"
    done = _passwd(args, stdin, str(path) if env_set else None)
    assert done.returncode == code
    assert len(done.stderr.strip().splitlines()) == 1
    assert not path.exists()


def test_the_sessions_files_comp_ids_may_have_passwords(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = tmp_path / "sessions.cfg"
    sessions.write_text("[FIRM]\nName=ACME\n[SESSION]\nTargetCompID = ACMEDC\nDropCopyFor=ACME\n")
    assert credentials.sessions_file_comp_ids({"FIXLAB_FIX_SESSIONS_FILE": str(sessions)}) == {"ACMEDC"}
    assert credentials.sessions_file_comp_ids({"FIXLAB_FIX_SESSIONS_FILE": str(tmp_path / "no")}) == set()
    path = tmp_path / "creds"
    monkeypatch.delenv("FIXLAB_FIX_SESSIONS_FILE", raising=False)
    with pytest.raises(CredentialsError, match="not a CompID"):
        credentials.set_password(path, "ACMEDC", "pw")
    monkeypatch.setenv("FIXLAB_FIX_SESSIONS_FILE", str(sessions))
    credentials.set_password(path, "ACMEDC", "pw")
    assert credentials.load(path).verify("ACMEDC", "pw")
