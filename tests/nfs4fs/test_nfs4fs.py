"""End-to-end tests with nfs4fs (PyPI), a third real NFSv4.1 client: an fsspec file
system over a vectorized client (libntirpc underneath). Issue 8, item 12.

tests/nfs4fs/run.sh starts the server (txnfs, then NFS-Ganesha) and runs this file
with the environment below. Every check compares bytes on the export's disk (the
server's directory on this host), not only what the client reads back.

    NFS4FS_SERVER   "txnfs" or "ganesha"
    NFS4FS_HOST     host[:port] for nfs4fs ("127.0.0.1:2049")
    NFS4FS_ROOT     export-relative root ("" for txnfs's "/", "export" for Ganesha)
    NFS4FS_EXPORT   the export's directory on this host

Every case passes on Ganesha 4.3 (Debian 12) today. A case that fails there because
of Ganesha gets `@pytest.mark.xfail(SERVER == "ganesha", reason=..., strict=True)`, so
the reason is printed (-rxX) and a Ganesha that starts passing is noticed.
"""

import hashlib
import os
import random
import shutil
import uuid

import fsspec
import nfs4fs  # noqa: F401  (registers the "nfs4" protocol)
import pytest

SERVER = os.environ["NFS4FS_SERVER"]
HOST = os.environ["NFS4FS_HOST"]
ROOT = os.environ.get("NFS4FS_ROOT", "")
EXPORT = os.environ["NFS4FS_EXPORT"]


@pytest.fixture(scope="module")
def fs():
    f = fsspec.filesystem(
        "nfs4",
        host=HOST,
        root=ROOT,
        auth="auth_sys",
        skip_instance_cache=True,
    )
    yield f


@pytest.fixture
def area(fs):
    """A fresh directory for one test: (its path for nfs4fs, its path on disk)."""
    name = "t-" + uuid.uuid4().hex[:10]
    fs.mkdir(name)
    disk = os.path.join(EXPORT, name)
    assert os.path.isdir(disk), "mkdir through nfs4fs made no directory on disk"
    yield name, disk
    shutil.rmtree(disk, ignore_errors=True)


def on_disk(path):
    with open(path, "rb") as f:
        return f.read()


def payload(seed, size):
    return random.Random(seed).randbytes(size)


def test_many_small_files_in_one_call_each_way(fs, area):
    remote, disk = area
    files = {f"{remote}/f{i:04}.bin": payload(i, (i * 37) % 5000) for i in range(300)}
    fs.pipe(files)  # one vectorized call writes them all
    for path, data in files.items():
        assert on_disk(os.path.join(EXPORT, path)) == data, path
    back = fs.cat(list(files))  # one vectorized call reads them all
    assert len(back) == len(files)
    by_name = {os.path.basename(k): v for k, v in back.items()}
    for path, data in files.items():
        assert by_name[os.path.basename(path)] == data, path


def test_ls_with_details(fs, area):
    remote, disk = area
    os.mkdir(os.path.join(disk, "sub"))
    sizes = {"a.txt": 0, "b.bin": 4097, "c.dat": 123456}
    for name, size in sizes.items():
        with open(os.path.join(disk, name), "wb") as f:
            f.write(payload(size, size))
    entries = fs.ls(remote, detail=True)
    got = {os.path.basename(e["name"].rstrip("/")): e for e in entries}
    assert set(got) == set(sizes) | {"sub"}
    assert got["sub"]["type"] == "directory"
    for name, size in sizes.items():
        assert got[name]["type"] == "file", got[name]
        assert got[name]["size"] == size == os.stat(os.path.join(disk, name)).st_size
    names = fs.ls(remote, detail=False)
    assert sorted(os.path.basename(n) for n in names) == sorted(got)


def test_mv_file_and_directory(fs, area):
    remote, disk = area
    data = payload(1, 10000)
    fs.pipe_file(f"{remote}/old.bin", data)
    fs.mv(f"{remote}/old.bin", f"{remote}/new.bin")
    assert not os.path.exists(os.path.join(disk, "old.bin"))
    assert on_disk(os.path.join(disk, "new.bin")) == data
    fs.mkdir(f"{remote}/d1")
    fs.pipe_file(f"{remote}/d1/x", b"inside")
    fs.mv(f"{remote}/d1", f"{remote}/d2", recursive=True)
    assert not os.path.exists(os.path.join(disk, "d1"))
    assert on_disk(os.path.join(disk, "d2", "x")) == b"inside"


def test_cp_file(fs, area):
    remote, disk = area
    data = payload(2, 3 << 20)
    fs.pipe_file(f"{remote}/src.bin", data)
    fs.cp_file(f"{remote}/src.bin", f"{remote}/dst.bin")
    assert on_disk(os.path.join(disk, "src.bin")) == data
    assert on_disk(os.path.join(disk, "dst.bin")) == data


def test_rm_recursive(fs, area):
    remote, disk = area
    for d in ["tree", "tree/a", "tree/a/b", "tree/c"]:
        os.mkdir(os.path.join(disk, d))
    for i, d in enumerate(["tree", "tree/a", "tree/a/b", "tree/c"]):
        for j in range(20):
            with open(os.path.join(disk, d, f"f{j}"), "wb") as f:
                f.write(payload(i * 100 + j, 100))
    with open(os.path.join(disk, "keep"), "wb") as f:
        f.write(b"keep")
    fs.rm(f"{remote}/tree", recursive=True)
    assert not os.path.exists(os.path.join(disk, "tree"))
    assert on_disk(os.path.join(disk, "keep")) == b"keep"


def test_32mib_file_through_open_with_seek(fs, area):
    remote, disk = area
    size = 32 << 20
    data = payload(32, size)
    with fs.open(f"{remote}/big.bin", "wb") as f:
        # uneven pieces, so that writes straddle the client's request size
        pos = 0
        step = (1 << 20) + 4099
        while pos < size:
            f.write(data[pos : pos + step])
            pos += step
    got = on_disk(os.path.join(disk, "big.bin"))
    assert len(got) == size
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    with fs.open(f"{remote}/big.bin", "rb") as f:
        for off, n in [(0, 100), (size - 10, 10), (7 << 20, 3 << 20), (12345, 1), (1 << 20, 1 << 20)]:
            f.seek(off)
            assert f.read(n) == data[off : off + n], (off, n)
        f.seek(-5, 2)
        assert f.read() == data[-5:]
        # the whole file again, front to back (one read() is capped at 16 MiB by
        # nfs4fs's read_all_max_total_bytes)
        f.seek(0)
        h = hashlib.sha256()
        while chunk := f.read(8 << 20):
            h.update(chunk)
    assert h.digest() == hashlib.sha256(data).digest()


def test_transaction_commits_all_files_at_the_end(fs, area):
    remote, disk = area
    files = {f"{remote}/tx{i}.txt": payload(100 + i, 1000 + i) for i in range(5)}
    with fs.transaction:
        for path, data in files.items():
            with fs.open(path, "wb") as f:
                f.write(data)
        # staged, not yet published
        for path in files:
            assert not os.path.exists(os.path.join(EXPORT, path)), path
    for path, data in files.items():
        assert on_disk(os.path.join(EXPORT, path)) == data, path


def test_transaction_discards_on_error(fs, area):
    remote, disk = area
    with pytest.raises(RuntimeError, match="abort"):
        with fs.transaction:
            with fs.open(f"{remote}/never.txt", "wb") as f:
                f.write(b"no")
            raise RuntimeError("abort")
    assert os.listdir(disk) == [], "a discarded transaction left files behind"
