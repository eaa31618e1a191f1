#!/usr/bin/env python3
"""Sending 1 MiB of file data over loopback TCP three ways (ADR 0052, addendum of
stop 30): pread into a buffer then send (what txnfs does), sendfile, and splice
through a pipe (file -> pipe -> socket, as a server that must know the count before
the RPC header would). A child process receives. Prints MB/s, the sender's CPU µs per
MiB (the kernel charges loopback delivery to the sender) and its voluntary context
switches, for ROUNDS rounds of each, alternating.
    python3 scripts/measure-splice.py [ROUNDS]
"""
import fcntl
import os
import resource
import socket
import sys
import tempfile
import time

SZ = 1 << 20
N = 3000
F_SETPIPE_SZ = 1031


def run(mode, fd, files):
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    port = ls.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        c = socket.create_connection(("127.0.0.1", port))
        buf = memoryview(bytearray(SZ))
        got = 0
        while got < N * SZ:
            n = c.recv_into(buf)
            if n == 0:
                break
            got += n
        os._exit(0)
    s, _ = ls.accept()
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, SZ)
    buf = bytearray(SZ)
    t0 = time.time()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    for i in range(N):
        off = (i % files) * SZ
        if mode == "copy":
            os.preadv(fd, [buf], off)
            s.sendall(buf)
        elif mode == "sendfile":
            left, o = SZ, off
            while left:
                k = os.sendfile(s.fileno(), fd, o, left)
                left -= k
                o += k
        else:
            n = os.splice(fd, w, SZ, offset_src=off)
            while n:
                n -= os.splice(r, s.fileno(), n)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    t1 = time.time()
    os.waitpid(pid, 0)
    for x in (s, ls):
        x.close()
    os.close(r)
    os.close(w)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    print(f"{mode:9} {N * SZ / 1e6 / (t1 - t0):6.0f} MB/s  sender {cpu / N * 1e6:4.0f} µs/MiB  "
          f"{ru1.ru_nvcsw - ru0.ru_nvcsw} voluntary switches")


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    files = 64
    with tempfile.NamedTemporaryFile(dir="/var/tmp") as f:
        f.write(os.urandom(files * SZ))
        f.flush()
        fd = os.open(f.name, os.O_RDONLY)
        for _ in range(rounds):
            for mode in ("copy", "sendfile", "splice"):
                run(mode, fd, files)


if __name__ == "__main__":
    main()
