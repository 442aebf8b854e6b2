"""The release check: the artifacts of `./stoker dist` work without the checkout and give what it gives.

    /usr/bin/python3 tools/release/check.py [--repo ROOT] [--dist DIR]

`./stoker test` runs it after `./stoker dist`. It unpacks dist/stoker-VERSION-linux-ARCH.tar.gz into a
temporary folder and runs the release's bin/stoker in a bare environment (`env -i PATH=/usr/bin:/bin
HOME=TMP`: no JAVA_HOME, no Maven, no checkout on any path):

* `bin/stoker --version` prints exactly `stoker VERSION`, as the checkout's `./stoker --version` does,
  VERSION being the one definition in .mvn/maven.config;
* `bin/stoker encode` of a two-image sample writes the same files, byte for byte, as `./stoker encode`;
* `bin/stoker serve` hands a trainer the same batches as `./stoker serve` of the same job: every batch
  of every rank has the same digest (tools/release/batch_digests.py). The checkout's service is read by
  the checkout's client; the release's by the wheel, installed into a venv
  (`python3 -m venv --system-site-packages`, `pip install --no-index --no-deps`) and run from a folder
  outside the repository, which must report `stoker.__version__` = VERSION and be imported from the venv.

Any difference ends the check with "release check FAILED: ..." on stderr and exit status 1.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYTHON = "/usr/bin/python3"
MAX_PIXELS = "50176"  # small images: the check is about the release, not throughput
RANKS, BATCH, STEPS = 2, 3, 3
ENCODED = {"input_ids.npy", "labels.npy", "attention_mask.npy", "position_ids.npy", "pixel_values.npy", "image_grid_thw.npy"}


class CheckFailed(Exception):
    pass


def fail(message):
    raise CheckFailed(message)


def log(message):
    print(f"release check: {message}", file=sys.stderr, flush=True)


def run(cmd, *, env=None, cwd=None, timeout=300):
    """Runs cmd to completion; its stdout, or a failure naming the command, its status and its output."""
    try:
        p = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, timeout=timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired as e:
        fail(f"{' '.join(map(str, cmd))} did not finish within {timeout} s; stderr: {e.stderr}")
    if p.returncode != 0:
        fail(f"{' '.join(map(str, cmd))} exited with {p.returncode}\nstdout: {p.stdout[-4000:]}\nstderr: {p.stderr[-4000:]}")
    return p.stdout


def bare_env(home):
    """What the release must run with: no JAVA_HOME, no Maven, no PYTHONPATH, nothing from the checkout."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home)}


def defined_version(repo):
    text = (repo / ".mvn" / "maven.config").read_text(encoding="utf-8")
    m = re.search(r"(?:^|\s)-Drevision=(\S+)", text)
    if not m or not re.fullmatch(r"\d+\.\d+\.\d+", m.group(1)):
        fail(f"no -Drevision=MAJOR.MINOR.PATCH in {repo / '.mvn' / 'maven.config'}")
    return m.group(1)


def unpack(tarball, into, version):
    """Unpacks the tarball; every member must lie under stoker-VERSION/."""
    top = f"stoker-{version}"
    with tarfile.open(tarball) as t:
        for m in t.getmembers():
            if not (m.name == top or m.name.startswith(top + "/")) or ".." in Path(m.name).parts:
                fail(f"{tarball}: member {m.name} is not under {top}/")
    run(["tar", "-xzf", tarball, "-C", into])
    home = into / top
    for path in ["bin/stoker", "runtime/bin/java", "lib/stoker-cli.jar", "clients/python/stoker/__init__.py", "assets/photos"]:
        if not (home / path).exists():
            fail(f"the release has no {path}")
    if (home / "runtime" / "bin" / "javac").exists():
        fail("the release's runtime is a whole JDK (it has javac), not the jlink runtime")
    return home


def make_dataset(repo, ds):
    """16 samples over four test images, one or two images each, question lengths varied (padding)."""
    ds.mkdir()
    images = repo / "testdata" / "qwen-vl" / "images"
    names = ["a.jpg", "b.png", "c.png", "d.png"]
    for name, src in zip(names, ["p01_photo_grace_hopper.jpg", "p08_exact_448x448.png", "p05_gray_L_320x240.png",
                                 "p06_rgba_alpha_300x200.png"]):
        shutil.copy(images / src, ds / name)
    lines = []
    for i in range(16):
        question = f"What is in picture {i}? " + "Describe it carefully. " * (i % 5)
        if i % 4 == 3:
            rec = {"id": f"s{i}", "image": [names[i % 4], names[(i + 1) % 4]],
                   "conversations": [{"from": "human", "value": "<image>\n<image>\n" + question},
                                     {"from": "gpt", "value": f"Two pictures, number {i}."}]}
        else:
            rec = {"id": f"s{i}", "image": names[i % 4],
                   "conversations": [{"from": "human", "value": "<image>\n" + question},
                                     {"from": "gpt", "value": f"Answer {i}."}]}
        lines.append(json.dumps(rec))
    (ds / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (ds / "sample.json").write_text(lines[3], encoding="utf-8")  # two images


def check_encode(checkout, release, env, ds, tmp):
    outs = {}
    for name, launcher, e in [("checkout", checkout, None), ("release", release, env)]:
        out = tmp / f"encode-{name}"
        run([launcher, "encode", "--processor", "qwen2.5-vl", "--max-pixels", MAX_PIXELS, "--sample", ds / "sample.json",
             "--out", out], env=e, cwd=tmp)
        outs[name] = out
    files = {p.name for p in outs["checkout"].iterdir()}
    if files != ENCODED:
        fail(f"the checkout's encode wrote {sorted(files)}, expected {sorted(ENCODED)}")
    release_files = {p.name for p in outs["release"].iterdir()}
    if release_files != files:
        fail(f"the release's encode wrote {sorted(release_files)}, the checkout's {sorted(files)}")
    for f in sorted(files):
        a, b = (outs["checkout"] / f).read_bytes(), (outs["release"] / f).read_bytes()
        if a != b:
            fail(f"encode: {f} differs between the checkout ({len(a)} bytes) and the release ({len(b)} bytes)")
    log(f"encode: the release wrote the checkout's {len(files)} files byte for byte")


def serve_and_digest(launcher, env, ds, tmp, name, client_cmd, client_env, client_cwd):
    """Runs `launcher serve` on the data set, the client against it, then SIGTERM; returns the client's report."""
    sock, shm, logf = tmp / f"{name}.sock", tmp / f"{name}-shm", tmp / f"{name}-serve.log"
    shm.mkdir()
    cmd = [str(launcher), "serve", "--data", str(ds / "train.jsonl"), "--ranks", str(RANKS), "--batch", str(BATCH),
           "--steps", str(STEPS), "--max-pixels", MAX_PIXELS, "--max-images", "2", "--threads", "2",
           "--socket", str(sock), "--shm-dir", str(shm), "--shm-budget", "256M"]
    with open(logf, "w") as out:
        service = subprocess.Popen(cmd, env=env, cwd=tmp, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "stoker serve: listening on " not in logf.read_text(errors="replace"):
            if service.poll() is not None:
                fail(f"{name} serve exited with {service.returncode} before listening:\n{logf.read_text(errors='replace')}")
            if time.monotonic() > deadline:
                fail(f"{name} serve did not listen within 120 s:\n{logf.read_text(errors='replace')}")
            time.sleep(0.2)
        report = json.loads(run(client_cmd + ["--socket", sock, "--world", RANKS], env=client_env, cwd=client_cwd,
                                timeout=180).strip().splitlines()[-1])
        service.send_signal(signal.SIGTERM)
        try:
            status = service.wait(timeout=60)
        except subprocess.TimeoutExpired:
            fail(f"{name} serve did not stop within 60 s of SIGTERM")
        if status != 0:
            fail(f"{name} serve exited with {status} after SIGTERM:\n{logf.read_text(errors='replace')}")
        return report
    finally:
        if service.poll() is None:
            os.killpg(service.pid, signal.SIGKILL)
            service.wait(timeout=30)


def check_serve(repo, checkout, release, env, ds, tmp, wheel, version):
    script = tmp / "batch_digests.py"  # a copy outside the repository: its folder is the client's sys.path[0]
    shutil.copy(HERE / "batch_digests.py", script)
    checkout_env = dict(os.environ, PYTHONPATH=str(repo / "clients" / "python"), PYTHONDONTWRITEBYTECODE="1")
    want = serve_and_digest(checkout, None, ds, tmp, "checkout", [PYTHON, script], checkout_env, tmp)

    venv = tmp / "venv"
    run([PYTHON, "-m", "venv", "--system-site-packages", venv], env=env, cwd=tmp)
    vpy = venv / "bin" / "python"
    run([vpy, "-m", "pip", "install", "-q", "--no-index", "--no-deps", wheel], env=env, cwd=tmp)
    meta = run([vpy, "-c", "import importlib.metadata as m; print(m.version('stoker-client'))"], env=env, cwd=tmp).strip()
    if meta != version:
        fail(f"the wheel's metadata says version {meta}, the release is {version}")
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    got = serve_and_digest(release, env, ds, tmp, "release", [vpy, script], env, elsewhere)

    if got["version"] != version:
        fail(f"the wheel's stoker.__version__ is {got['version']!r}, the release is {version}")
    if not Path(got["file"]).resolve().is_relative_to(venv.resolve()):
        fail(f"the venv's client imported stoker from {got['file']}, not from the venv {venv}")
    if want["version"] != version:
        fail(f"the checkout's stoker.__version__ is {want['version']!r}, the release is {version}")
    for rank in map(str, range(RANKS)):
        a, b = want["ranks"][rank], got["ranks"][rank]
        if len(a) != STEPS:
            fail(f"the checkout's serve gave rank {rank} {len(a)} batches, expected {STEPS}")
        if a != b:
            fail(f"serve: rank {rank}'s batches differ: the checkout's {a}, the release's {b}")
    log(f"serve: {RANKS} ranks x {STEPS} batches from the release (read by the wheel {version} in a venv) "
        "equal the checkout's")


def main():
    p = argparse.ArgumentParser(description="The release check (see the module's doc).")
    p.add_argument("--repo", type=Path, default=HERE.parent.parent)
    p.add_argument("--dist", type=Path, default=None, help="default: REPO/dist")
    args = p.parse_args()
    repo = args.repo.resolve()
    dist = (args.dist or repo / "dist").resolve()
    started = time.monotonic()
    try:
        version = defined_version(repo)
        tarball = dist / f"stoker-{version}-linux-{os.uname().machine}.tar.gz"
        wheel = dist / f"stoker_client-{version}-py3-none-any.whl"
        for f in (tarball, wheel):
            if not f.is_file():
                fail(f"{f} is missing: run ./stoker dist")
        with tempfile.TemporaryDirectory(prefix="stoker-release-check.") as t:
            tmp = Path(t)
            home = tmp / "home"
            home.mkdir()
            env = bare_env(home)
            release_home = unpack(tarball, tmp, version)
            release = release_home / "bin" / "stoker"
            checkout = repo / "stoker"

            want = f"stoker {version}\n"
            for name, launcher, e in [("checkout", checkout, None), ("release", release, env)]:
                printed = run([launcher, "--version"], env=e, cwd=tmp)
                if printed != want:
                    fail(f"the {name}'s stoker --version printed {printed!r}, expected {want!r}")
            log(f"--version: {want.strip()} from the release and the checkout")

            ds = tmp / "ds"
            make_dataset(repo, ds)
            check_encode(checkout, release, env, ds, tmp)
            check_serve(repo, checkout, release, env, ds, tmp, wheel, version)
    except CheckFailed as e:
        print(f"release check FAILED: {e}", file=sys.stderr)
        return 1
    log(f"passed in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
