#!/usr/bin/env python3
"""One 1 MiB request at a time over loopback TCP (ADR 0065), outside txnfs: the
server process sends file data either by pread into a buffer and sendmsg (two
kernel copies on the server) or by splice file -> pipe -> socket (page references,
no copy on the server); the client receives with MSG_WAITALL into one buffer.
Prints MB/s, microseconds per request and the client's CPU per request.
scripts/measure-splice.py (ADR 0052, stop 30) measures a continuous stream instead,
where splice loses; here every reply goes into an idle socket, where it wins.
usage: measure-splice-rr.py FILE copy|splice SECONDS
  head -c 268435456 /dev/urandom > /tmp/big && cat /tmp/big > /dev/null
  for m in copy splice copy splice; do python3 scripts/measure-splice-rr.py /tmp/big $m 4; done"""
import os, socket, struct, sys, time, fcntl
F, MODE, SECS = sys.argv[1], sys.argv[2], float(sys.argv[3])
IO = 1 << 20
size = os.path.getsize(F)
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(('127.0.0.1', 0)); ls.listen(1); port = ls.getsockname()[1]
pid = os.fork()
if pid == 0:
    c, _ = ls.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    fd = os.open(F, os.O_RDONLY)
    buf = bytearray(IO)
    pr, pw = os.pipe()
    fcntl.fcntl(pw, 1031, IO)  # F_SETPIPE_SZ
    while True:
        req = c.recv(8, socket.MSG_WAITALL)
        if len(req) < 8: break
        off, = struct.unpack('!Q', req)
        hdr = struct.pack('!Q', IO)
        if MODE == 'copy':
            n = os.preadv(fd, [buf], off)
            c.sendmsg([hdr, buf])
        else:
            c.send(hdr, socket.MSG_MORE)
            left = IO; o = off
            while left:
                n = os.splice(fd, pw, left, offset_src=o)
                o += n; left -= n
                m = n
                while m:
                    m -= os.splice(pr, c.fileno(), m)
    os._exit(0)
s = socket.create_connection(('127.0.0.1', port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rb = bytearray(IO + 8); mv = memoryview(rb)
t0 = time.time(); n = 0; off = 0
c0 = os.times()
while time.time() - t0 < SECS:
    s.sendall(struct.pack('!Q', off))
    got = 0
    while got < IO + 8:
        got += s.recv_into(mv[got:], IO + 8 - got, socket.MSG_WAITALL)
    n += 1; off = (off + IO) % (size - IO)
dt = time.time() - t0
c1 = os.times()
s.close(); os.waitpid(pid, 0)
print('%-6s %7.0f MB/s  %.0f us/req  client cpu %.0f us/req' % (MODE, n * IO / dt / 1e6, dt / n * 1e6, ((c1.user - c0.user) + (c1.system - c0.system)) / n * 1e6))
