#!/usr/bin/env python3
"""Write the tar archive the guest extracts onto the NFS mount (test step b).

usage: make-tree.py OUT.tar [SEED [FILES_PER_DIR]]

tree/aN/bM/ (5 x 10 = 50 leaf directories, depth 3) with FILES_PER_DIR (default 100, at least
12) regular files each (5,000 files by default):
sizes 0..8 KiB (a few exactly 0, 4096, 8192), random content, modes 0644/0600/0755/0444,
some owned by 1234:5678, mtimes spread over 2001..2020.  Plus, per leaf directory, two
relative symlinks to files of a sibling directory; a directory symlink and a hard link per top
directory; a 255-byte file name, a name with spaces and a UTF-8 name.  Deterministic for a seed.
"""
import io
import random
import sys
import tarfile

out = sys.argv[1]
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
per_dir = int(sys.argv[3]) if len(sys.argv) > 3 else 100
if per_dir < 12:
    sys.exit("make-tree.py: FILES_PER_DIR must be at least 12 (the links name f005 and f010)")
rng = random.Random(seed)
T0, T1 = 978307200, 1600000000  # 2001-01-01 .. 2020-09-13


def add_dir(tf, name, mode=0o755):
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.DIRTYPE
    ti.mode = mode
    ti.mtime = rng.randint(T0, T1)
    tf.addfile(ti)


files = {}


def add_file(tf, name, size, mode=0o644, uid=0, gid=0):
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mode = mode
    ti.uid, ti.gid = uid, gid
    ti.mtime = rng.randint(T0, T1)
    tf.addfile(ti, io.BytesIO(rng.randbytes(size)))
    files[name] = ti


def add_link(tf, name, target, hard=False):
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    ti.linkname = target
    ti.mode = 0o777
    ti.mtime = rng.randint(T0, T1)
    if hard:  # same metadata as the target: extractors differ in whether they apply it
        t = files[target]
        ti.mode, ti.uid, ti.gid, ti.mtime = t.mode, t.uid, t.gid, t.mtime
    tf.addfile(ti)


count = 0
with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tf:
    add_dir(tf, "tree")
    for a in range(5):
        add_dir(tf, f"tree/a{a}", 0o755 if a != 3 else 0o750)
        for b in range(10):
            d = f"tree/a{a}/b{b}"
            add_dir(tf, d)
            for i in range(per_dir):
                r = rng.random()
                if i == 0:
                    size = 0
                elif i == 1:
                    size = 4096
                elif i == 2:
                    size = 8192
                else:
                    size = rng.randint(0, 8192)
                mode = rng.choice([0o644, 0o644, 0o644, 0o600, 0o755, 0o444])
                uid, gid = (1234, 5678) if r < 0.05 else (0, 0)
                add_file(tf, f"{d}/f{i:03d}", size, mode, uid, gid)
                count += 1
            # relative symlinks to files of the sibling directory
            sib = (b + 1) % 10
            add_link(tf, f"{d}/s0", f"../b{sib}/f010")
            add_link(tf, f"{d}/s1", f"../b{sib}/f{rng.randint(3, per_dir - 1):03d}")
        add_link(tf, f"tree/a{a}/dirlink", "b0")
        add_link(tf, f"tree/a{a}/hardlink", f"tree/a{a}/b1/f005", hard=True)
    add_dir(tf, "tree/names")
    add_file(tf, "tree/names/" + "L" * 255, 100)
    add_file(tf, "tree/names/with some spaces", 10)
    add_file(tf, "tree/names/\u00fcml\u00e4ut-\u65e5\u672c", 20)
print(f"{out}: {count + 3} regular files")
