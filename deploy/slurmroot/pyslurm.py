"""pyslurm built for a Slurm root (issue 43), used only inside that root.

    built = build_pyslurm("24.11", vendor_dir, venv_python)   # once; cached, stamped, atomic

pyslurm is compiled against one Slurm release and links its ``libslurmfull.so`` by path
(rpath /usr/lib/x86_64-linux-gnu/slurm-wlm): the 24.11 build must never load beside the
host's 22.05 library, and the host's 22.5.3 (in the project's .venv) must stay what the
host sees. So the build is installed into its own directory, ``<cache>/<V>/site``, and a
one-line ``.pth`` in the venv puts it first on sys.path only in a process whose /usr is that
root's /usr (its libslurmfull.so is the same file as the root's: one stat each). Every
venv python run inside the root (the emulated cluster's hooks, the contract driver) thus
imports pyslurm 24.11; everywhere else the .pth adds nothing.

The build is reproducible from pinned inputs: the vendored source (sha256 checked), the
Debian packages at exactly the root's Slurm version (libslurm-dev for the headers), and the
Python build tools pinned below. It runs in a throw-away build root (mmdebstrap: gcc,
libc6-dev, libslurm-dev), not in the runtime root: adding compilers to slurmroot.PACKAGES
would change every root. Steps are argv lists built by pure functions, as in
deploy.slurmroot; the .pth text is built from validated paths only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from deploy.slurmroot import (
    DEFAULT_CACHE,
    PYTHON_LIB_PACKAGES,
    SlurmRootError,
    Stamp,
    _run,
    exec_argv,
    find,
    mmdebstrap_argv,
)

DEFAULT_PYSLURM_CACHE = Path("/var/cache/screener/pyslurm")
STAMP = "pyslurm.json"  # written last: its presence means "done"
# Where Debian's Slurm puts the library pyslurm links (setup.py finds it under slurm-wlm/).
LIBSLURMFULL = "usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so"
SOURCE_DATE_EPOCH = "1735689600"  # 2025-01-01: fixed timestamps inside the wheel


@dataclass(frozen=True)
class Source:
    """A vendored pyslurm release for one Slurm release (../shared/vendor/README.md)."""

    version: str  # pyslurm's own: "24.11.0"
    tarball: str  # file name in the vendor directory
    sha256: str


# Slurm release -> its pyslurm. 26.05 has none: PySlurm's tags stop at v25.11.x (a 25.11
# build would not load against 26.05's libslurmfull).
SOURCES: dict[str, Source] = {
    "24.11": Source(
        "24.11.0",
        "pyslurm-24.11.0.tar.gz",
        "d73656b234ac02981e95bb467c069d2f9a3fe32e86a26398dc3a41ef36b6ae50",
    ),
}
# pyslurm 24.11.0's pyproject asks Cython>=0.29.37, setuptools>=59.2, wheel, packaging: the
# releases current when it was tagged (2025-01), pinned so a rebuild compiles the same code.
BUILD_TOOLS = ("Cython==3.0.11", "setuptools==75.8.0", "wheel==0.45.1", "packaging==24.2")
# What compiling it needs beyond Essential; the Slurm ones pinned to the root's version.
COMPILER_PACKAGES = ("gcc", "libc6-dev")
SLURM_DEV_PACKAGES = ("libslurm-dev", "slurm-wlm-basic-plugins")  # headers; libslurmfull.so
_SAFE_PATH_RE = re.compile(r"/[A-Za-z0-9._/+-]+")


@dataclass(frozen=True)
class PyslurmStamp:
    """What a finished build holds, read from its stamp file."""

    slurm_release: str  # "24.11"
    pyslurm: str  # "24.11.0"
    slurm: str  # the root's dpkg version of Slurm it was built against
    libslurmfull_sha256: str  # of the root's library: a rebuilt root needs a rebuild
    wheel: str
    wheel_sha256: str
    build_tools: tuple[str, ...]
    build_seconds: float

    def to_json(self) -> dict[str, object]:
        return {**self.__dict__, "build_tools": list(self.build_tools)}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> PyslurmStamp:
        tools = data["build_tools"]
        assert isinstance(tools, list)
        return cls(
            slurm_release=str(data["slurm_release"]),
            pyslurm=str(data["pyslurm"]),
            slurm=str(data["slurm"]),
            libslurmfull_sha256=str(data["libslurmfull_sha256"]),
            wheel=str(data["wheel"]),
            wheel_sha256=str(data["wheel_sha256"]),
            build_tools=tuple(str(t) for t in tools),
            build_seconds=float(str(data["build_seconds"])),
        )


@dataclass(frozen=True)
class PyslurmBuild:
    site: Path  # the directory the .pth puts first on sys.path inside the root
    stamp: PyslurmStamp
    pth: Path | None  # the .pth written into the venv (None: only looked up)
    built_now: bool


# -- pure pieces ----------------------------------------------------------------------------
def source_for(version: str) -> Source:
    try:
        return SOURCES[version]
    except KeyError:
        known = ", ".join(sorted(SOURCES))
        raise SlurmRootError(
            f"PySlurm has no release for Slurm {version} (its tags stop at v25.11.x; vendored "
            f"here: {known}): the CLI backend serves it"
        ) from None


def build_dir(version: str, cache: Path = DEFAULT_PYSLURM_CACHE) -> Path:
    return cache / version


def site_dir(version: str, cache: Path = DEFAULT_PYSLURM_CACHE) -> Path:
    """Where the build is installed (a pip --target tree: pyslurm/, its dist-info)."""
    return build_dir(version, cache) / "site"


def pth_name(version: str) -> str:
    return f"screener-pyslurm-{version}.pth"


def pth_line(site: Path, root: Path) -> str:
    """The .pth line: `site` first on sys.path iff /usr's libslurmfull.so is `root`'s.

    A .pth line starting with `import` is executed by site.py at every start of the venv's
    python; this one costs two stats (and a third where the first two exist)."""
    here, theirs = f"/{LIBSLURMFULL}", str(root / LIBSLURMFULL)
    for path in (str(site), theirs):
        if not _SAFE_PATH_RE.fullmatch(path):
            raise SlurmRootError(f"not a safe path for a .pth line: {path!r}")
    return (
        f"import os, sys; sys.path.insert(0, {str(site)!r}) "
        f"if os.path.isfile({here!r}) and os.path.isfile({theirs!r}) "
        f"and os.path.samefile({here!r}, {theirs!r}) else None\n"
    )


def build_root_packages(slurm_version: str) -> tuple[str, ...]:
    """mmdebstrap --include list: compilers, the Slurm dev files at the root's exact version,
    and the libraries the venv's python links (it runs pip inside)."""
    pinned = tuple(f"{p}={slurm_version}" for p in SLURM_DEV_PACKAGES)
    return COMPILER_PACKAGES + pinned + PYTHON_LIB_PACKAGES


def venv_argv(python: Path, target: Path) -> list[str]:
    """A build venv from the project's interpreter (same CPython, same ABI tag)."""
    return [str(python), "-m", "venv", str(target)]


def pip_tools_argv(venv: Path) -> list[str]:
    return [str(venv / "bin/python"), "-m", "pip", "install", "-q", *BUILD_TOOLS]


def wheel_argv(venv: Path, src: Path, out: Path) -> list[str]:
    """`pip wheel` of the unpacked source, run inside the build root (its gcc, its headers);
    setup.py reads SLURM_INCLUDE_DIR/SLURM_LIB_DIR and checks slurm_version.h's release."""
    return [
        "env",
        "SLURM_INCLUDE_DIR=/usr/include",
        "SLURM_LIB_DIR=/usr/lib/x86_64-linux-gnu",  # setup.py looks in slurm-wlm/ below it
        "PYSLURM_BUILD_JOBS=2",  # cythonize's threads; the C compile stays serial
        f"SOURCE_DATE_EPOCH={SOURCE_DATE_EPOCH}",
        str(venv / "bin/python"),
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-build-isolation",  # the pinned tools above, not whatever PyPI has today
        "--no-deps",
        "-w",
        str(out),
        str(src),
    ]


def install_argv(venv: Path, wheel: Path, target: Path) -> list[str]:
    return [
        str(venv / "bin/python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-compile",  # compiled below, under the interpreter that imports it
        "--target",
        str(target),
        str(wheel),
    ]


def check_argv(python: Path, site: Path, conf: Path) -> list[str]:
    """Import the build inside the root the way the hooks do (sys.path from the site dir)
    and print its version and the Slurm API it was built for."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import pyslurm; "
        "print(pyslurm.__version__, *pyslurm.slurm_api_version())"
    )
    return ["env", f"SLURM_CONF={conf}", str(python), "-c", code, str(site)]


# -- helpers --------------------------------------------------------------------------------
def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_stamp(version: str, cache: Path = DEFAULT_PYSLURM_CACHE) -> PyslurmStamp | None:
    try:
        data = json.loads((build_dir(version, cache) / STAMP).read_text())
    except FileNotFoundError:
        return None
    return PyslurmStamp.from_json(data)


def venv_purelib(python: Path) -> Path:
    """The venv's site-packages, where a .pth is read at start-up."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(_run([str(python), "-c", code], 60).strip())


def install_pth(version: str, python: Path, site: Path, root: Path) -> Path:
    """Write (atomically) the venv's .pth for this build; returns its path."""
    pth = venv_purelib(python) / pth_name(version)
    tmp = pth.with_name(f".{pth.name}.{os.getpid()}.tmp")
    tmp.write_text(pth_line(site, root))
    os.replace(tmp, pth)
    return pth


def find_pyslurm(version: str, cache: Path = DEFAULT_PYSLURM_CACHE) -> PyslurmBuild:
    """A finished build, or SlurmRootError saying how to make one (one line)."""
    stamp = read_stamp(version, cache)
    if stamp is None:
        source_for(version)  # a release without a source says so, not "build it"
        raise SlurmRootError(
            f"no pyslurm build for Slurm {version} in {cache}: `make pyslurm SLURM={version}`"
        )
    return PyslurmBuild(site_dir(version, cache), stamp, None, built_now=False)


# -- build ----------------------------------------------------------------------------------
def build_pyslurm(
    version: str,
    vendor: Path,
    python: Path,
    cache: Path = DEFAULT_PYSLURM_CACHE,
    root_cache: Path = DEFAULT_CACHE,
    timeout: float = 3600.0,
) -> PyslurmBuild:
    """pyslurm for Slurm `version`, built once against its root (deploy.slurmroot.build
    first) with `python` (the project's venv interpreter: the same CPython must import it),
    whose venv gets the .pth (rewritten on every call: a new venv has none).

    A stamp whose libslurmfull checksum is not the root's any more (the root was rebuilt)
    is rebuilt. Atomic like the root: built in `<version>.partial`, stamped, renamed."""
    src = source_for(version)
    root = find(version, root_cache)  # the runtime root must exist: its packages pin ours
    lib_sha = sha256_of(root.path / LIBSLURMFULL)
    final = build_dir(version, cache)
    cache.mkdir(parents=True, exist_ok=True)
    built_now = False
    with open(cache / f"{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent builder finishes first
        stamp = read_stamp(version, cache)
        if stamp is None or stamp.libslurmfull_sha256 != lib_sha:
            stamp = _build(
                version,
                src,
                vendor / src.tarball,
                python,
                root.path,
                root.stamp,
                lib_sha,
                cache,
                timeout,
            )
            built_now = True
        pth = install_pth(version, python, final / "site", root.path)
    return PyslurmBuild(final / "site", stamp, pth, built_now)


def _build(
    version: str,
    src: Source,
    tarball: Path,
    python: Path,
    root: Path,
    root_stamp: Stamp,
    lib_sha: str,
    cache: Path,
    timeout: float,
) -> PyslurmStamp:
    """The build itself, under the lock; returns the stamp of `<cache>/<version>`."""
    if not tarball.is_file():
        raise SlurmRootError(f"pyslurm source {tarball} not found (../shared/vendor/)")
    if sha256_of(tarball) != src.sha256:
        raise SlurmRootError(f"{tarball}: sha256 is not the vendored {src.sha256[:12]}...")
    if shutil.which("mmdebstrap") is None:
        raise SlurmRootError("mmdebstrap is not installed (apt-get install mmdebstrap)")
    final = build_dir(version, cache)
    work = cache / f"{version}.partial"
    if work.exists():
        shutil.rmtree(work)  # an interrupted build: never reused
    work.mkdir(parents=True)
    log = work / "build.log"
    start = time.monotonic()
    broot, venv, out, site = work / "buildroot", work / "venv", work / "wheels", work / "site"
    packages = build_root_packages(root_stamp.slurm)
    mm = mmdebstrap_argv(root_stamp.suite, broot, root_stamp.mirror, packages)
    try:
        _run(mm, timeout, log=log)
    except SlurmRootError as exc:
        raise SlurmRootError(
            f"{exc}; the mirror must still serve Slurm {root_stamp.slurm} (else rebuild the "
            f"root: rm -r {root} && make slurm-root SLURM={version})"
        ) from None
    _run(venv_argv(python, venv), 300, log=log)
    _run(pip_tools_argv(venv), 600, log=log)
    with tarfile.open(tarball) as tar:
        tar.extractall(work / "src", filter="data")
    unpacked = work / "src" / f"pyslurm-{src.version}"
    _run(exec_argv(broot, wheel_argv(venv, unpacked, out)), timeout, log=log)
    wheels = sorted(out.glob(f"pyslurm-{src.version}-*.whl"))
    if len(wheels) != 1:
        raise SlurmRootError(f"pip wheel left {len(wheels)} pyslurm wheels in {out} (log: {log})")
    _run(install_argv(venv, wheels[0], site), 300, log=log)
    _run([str(venv / "bin/python"), "-m", "compileall", "-q", str(site)], 300, log=log)
    missing = _run(exec_argv(root, ["sh", "-c", _LDD_SCRIPT, "ldd", str(site)]), 60)
    if missing.strip():
        raise SlurmRootError(f"pyslurm's modules miss libraries in the root: {missing.strip()}")
    conf = work / "check-slurm.conf"  # libslurm's init parses one; nothing is contacted
    conf.write_text("ClusterName=pyslurmcheck\nSlurmctldHost=localhost\n")
    said = _run(exec_argv(root, check_argv(python, site, conf)), 120).split()
    # "24.11.0 24 11 5": pyslurm's release, then the Slurm API it was compiled for
    want = [src.version, *(str(int(p)) for p in version.split("."))]
    if said[:3] != want:
        raise SlurmRootError(f"the build imports as {' '.join(said)!r} in the root, not {want}")
    stamp = PyslurmStamp(
        slurm_release=version,
        pyslurm=src.version,
        slurm=root_stamp.slurm,
        libslurmfull_sha256=lib_sha,
        wheel=wheels[0].name,
        wheel_sha256=sha256_of(wheels[0]),
        build_tools=BUILD_TOOLS,
        build_seconds=round(time.monotonic() - start, 1),
    )
    keep = work / "keep"
    keep.mkdir()
    os.rename(site, keep / "site")
    os.rename(wheels[0], keep / wheels[0].name)  # for the record (and a pip install by hand)
    os.rename(log, keep / "build.log")
    (keep / STAMP).write_text(json.dumps(stamp.to_json(), indent=2) + "\n")
    if final.exists():  # a stale build (the root was rebuilt): replaced whole
        old = cache / f"{version}.old"
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(old)
        os.rename(final, old)
        shutil.rmtree(old)
    os.rename(keep, final)
    shutil.rmtree(work)  # the build root, venv and sources: ~350 MiB nobody reads again
    return stamp


# $1 = the site dir: every extension module's unresolved libraries, one per line (none: "").
_LDD_SCRIPT = 'find "$1" -name "*.so" -exec ldd {} + | grep "not found" | sort -u; true'
