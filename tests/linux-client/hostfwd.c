/*
 * hostfwd: the host end of QEMU's slirp guestfwd ("guestfwd=...-cmd:hostfwd HOST PORT"),
 * started once per guest TCP connection with that connection on stdin/stdout.  It connects to
 * HOST:PORT and copies bytes both ways, like `socat STDIO TCP4:HOST:PORT`, with one difference
 * that matters a lot: latency.
 *
 * libslirp hands the guest connection to the command over a loopback *TCP* socket pair whose
 * slirp end has Nagle enabled.  An NFS WRITE larger than one segment (about 1.4 KB) arrives
 * from the guest as several segments that slirp writes separately: the second write waits for
 * the ACK of the first, and a plain reader (socat) delays that ACK by ~40 ms.  That made every
 * small-file write cost ~50 ms and a 5,000-file tar extraction take 7+ minutes.  hostfwd sets
 * TCP_QUICKACK after every read (which also flushes an ACK already scheduled) and TCP_NODELAY
 * on what it writes, so a round trip costs what the guest and the server cost.
 *
 * Exits when the server closes (e.g. it was killed: slirp then closes the guest connection and
 * the client reconnects, getting a fresh hostfwd) or when both directions are done.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char buf[1 << 18];

static void quickack(int fd)
{
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
}

static void nodelay(int fd)
{
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int write_all(int fd, const char *p, ssize_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, (size_t)n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= w;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: hostfwd HOST PORT (guest connection on stdin/stdout)\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	struct addrinfo hints, *ai;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int e = getaddrinfo(argv[1], argv[2], &hints, &ai);
	if (e != 0) {
		fprintf(stderr, "hostfwd: %s:%s: %s\n", argv[1], argv[2], gai_strerror(e));
		return 1;
	}
	int s = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
	if (s < 0 || connect(s, ai->ai_addr, ai->ai_addrlen) != 0) {
		fprintf(stderr, "hostfwd: connect %s:%s: %s\n", argv[1], argv[2], strerror(errno));
		return 1;
	}
	freeaddrinfo(ai);
	nodelay(s);
	nodelay(1); /* no-op unless stdout is a TCP socket (it is, with libslirp) */

	int in_open = 1;
	for (;;) {
		struct pollfd p[2] = { { 0, POLLIN, 0 }, { s, POLLIN, 0 } };
		int np = in_open ? 2 : 1;
		struct pollfd *pp = in_open ? p : p + 1;
		if (poll(pp, (nfds_t)np, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if (in_open && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = read(0, buf, sizeof buf);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				in_open = 0;
				shutdown(s, SHUT_WR);
			} else {
				quickack(0);
				if (write_all(s, buf, n) != 0)
					return 0;
			}
		}
		if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t n = read(s, buf, sizeof buf);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return 0;
			quickack(s);
			if (write_all(1, buf, n) != 0)
				return 0;
		}
	}
}
