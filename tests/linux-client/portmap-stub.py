#!/usr/bin/env python3
"""The guest's view of the server's portmapper (10.0.2.100:111), one connection on stdin/stdout
(QEMU's guestfwd runs it per connection): every program the txnfs port serves (NFS, MOUNT, NLM,
NSM) is at port 2049, where the guest reaches that port.  The Linux NLM client looks the
server's lockd up here (PMAP v2 GETPORT over TCP); rpcbind v3/v4 GETADDR is answered too.
Anything else: PROG_UNAVAIL / PROC_UNAVAIL."""
import struct
import sys

SERVED = {100003, 100005, 100021, 100024}
PORT = 2049
UADDR = b"10.0.2.100.8.1"  # port 2049 = 8 * 256 + 1


def read_exact(f, n):
    b = b""
    while len(b) < n:
        c = f.read(n - len(b))
        if not c:
            return None
        b += c
    return b


def read_record(f):
    data = b""
    while True:
        h = read_exact(f, 4)
        if h is None:
            return None
        (mark,) = struct.unpack(">I", h)
        frag = read_exact(f, mark & 0x7FFFFFFF)
        if frag is None:
            return None
        data += frag
        if mark & 0x80000000:
            return data


def opaque(b, i):
    (n,) = struct.unpack_from(">I", b, i)
    return b[i + 4:i + 4 + n], i + 4 + ((n + 3) & ~3)


def xdr_string(s):
    return struct.pack(">I", len(s)) + s + b"\0" * ((4 - len(s) % 4) % 4)


def answer(call):
    xid, _mtype, _rpcvers, prog, vers, proc = struct.unpack_from(">6I", call, 0)
    i = 24
    _, i = opaque(call, i + 4)  # credential: flavour, body
    _, i = opaque(call, i + 4)  # verifier
    args = call[i:]
    head = struct.pack(">6I", xid, 1, 0, 0, 0, 0)  # REPLY, MSG_ACCEPTED, AUTH_NONE verifier
    if prog != 100000:
        return struct.pack(">6I", xid, 1, 0, 0, 0, 1)  # PROG_UNAVAIL
    if proc == 0:
        return head
    if vers == 2 and proc == 3:  # GETPORT(mapping)
        p, _v, prot, _ = struct.unpack_from(">4I", args, 0)
        return head + struct.pack(">I", PORT if p in SERVED and prot == 6 else 0)
    if vers in (3, 4) and proc == 3:  # GETADDR(rpcb)
        p, _v = struct.unpack_from(">2I", args, 0)
        netid, _ = opaque(args, 8)
        return head + xdr_string(UADDR if p in SERVED and netid == b"tcp" else b"")
    return struct.pack(">6I", xid, 1, 0, 0, 0, 3)  # PROC_UNAVAIL


def main():
    rd, wr = sys.stdin.buffer, sys.stdout.buffer
    while True:
        call = read_record(rd)
        if call is None:
            return
        try:
            reply = answer(call)
        except struct.error:
            return
        wr.write(struct.pack(">I", 0x80000000 | len(reply)) + reply)
        wr.flush()


main()
