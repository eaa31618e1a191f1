#!/usr/bin/env python3
"""One 1 MiB WRITE-like request at a time over loopback TCP (ADR 0063 addendum), outside
txnfs: what a minimal server with txnfs's receive path reaches. The client sends a
16-byte header (offset, length) and 1 MiB in one sendmsg and waits for an 8-byte reply.
The server wakes on the header, sets SO_RCVLOWAT to the rest, and then either
  copy:   recv into a buffer, pwrite to the file (txnfs's way), or
  splice: splice socket -> pipe -> file (no copy out of the socket),
then answers. The file is rewritten in a 256 MiB circle, as `bench run seqwrite` does.
Prints MB/s, microseconds per request, and client and server CPU and the server's
context switches per request.
usage: measure-write-rr.py FILE copy|splice SECONDS
  for m in copy splice copy splice; do python3 scripts/measure-write-rr.py /var/tmp/w $m 4; done"""
import fcntl, os, select, socket, struct, sys, time

F, MODE, SECS = sys.argv[1], sys.argv[2], float(sys.argv[3])
IO, SPAN = 1 << 20, 256 << 20
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(('127.0.0.1', 0)); ls.listen(1)
port = ls.getsockname()[1]
rd, wr = os.pipe()
pid = os.fork()
if pid == 0:
    c, _ = ls.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.setblocking(False)
    fd = os.open(F, os.O_WRONLY | os.O_CREAT, 0o644)
    buf = bytearray(IO); mv = memoryview(buf)
    pr, pw = os.pipe()
    fcntl.fcntl(pw, 1031, IO)  # F_SETPIPE_SZ
    ep = select.epoll(); ep.register(c.fileno(), select.EPOLLIN)

    def wait_for(left):
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, left)
        ep.poll()

    while True:
        ep.poll()
        try:
            hdr = c.recv(16, socket.MSG_PEEK)
        except BlockingIOError:
            continue
        if not hdr:
            break
        if len(hdr) < 16:
            continue
        c.recv(16)
        off, n = struct.unpack('!QQ', hdr)
        got = 0
        while got < n:
            try:
                if MODE == 'copy':
                    got += c.recv_into(mv[got:], n - got)
                else:
                    got += os.splice(c.fileno(), pw, n - got,
                                     flags=os.SPLICE_F_NONBLOCK | os.SPLICE_F_MOVE)
            except BlockingIOError:
                wait_for(n - got)
        if MODE == 'copy':
            os.pwrite(fd, buf, off)
        else:
            o = off
            while got:
                k = os.splice(pr, fd, got, offset_dst=o)
                o += k; got -= k
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
        c.send(b'okokokok')
    t = os.times()
    status = open('/proc/self/status').read()
    ctx = sum(int(l.split()[1]) for l in status.splitlines() if 'ctxt_switches' in l)
    os.write(wr, struct.pack('!dQ', t.user + t.system, ctx))
    os._exit(0)
s = socket.create_connection(('127.0.0.1', port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
data = os.urandom(IO)
t0 = time.time(); c0 = os.times(); n = 0; off = 0
while time.time() - t0 < SECS:
    s.sendmsg([struct.pack('!QQ', off, IO), data])
    s.recv(8, socket.MSG_WAITALL)
    n += 1; off = (off + IO) % SPAN
dt = time.time() - t0; c1 = os.times()
s.close(); os.waitpid(pid, 0)
server_cpu, server_ctx = struct.unpack('!dQ', os.read(rd, 16))
print('%-6s %5.0f MB/s  %4.0f us/req  client %3.0f us  server %3.0f us %.2f ctx per req' % (
    MODE, n * IO / dt / 1e6, dt / n * 1e6,
    ((c1.user - c0.user) + (c1.system - c0.system)) / n * 1e6,
    server_cpu / n * 1e6, server_ctx / n))
