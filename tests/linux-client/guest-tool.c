/*
 * guest-tool: tiny static helper for the Linux-client VM tests (the guest has
 * busybox only: no flock(1), no compiler, no python).  Built on the host with
 * `gcc -static` by build-initramfs.sh and copied into the initramfs.
 *
 *   guest-tool flock FILE {x|s} HOLD
 *       flock(2) LOCK_EX (x) or LOCK_SH (s), non-blocking.
 *   guest-tool fcntl FILE {w|r} START LEN HOLD
 *       fcntl(2) F_SETLK F_WRLCK (w) or F_RDLCK (r) on [START, START+LEN).
 *   guest-tool rename OLD NEW
 *       plain rename(2) (busybox mv moves a directory *into* an existing one).
 *   guest-tool falloc FILE OFFSET LEN [punch]
 *       fallocate(2) mode 0 (NFSv4.2 ALLOCATE), or PUNCH_HOLE|KEEP_SIZE (DEALLOCATE).
 *   guest-tool seek FILE OFFSET {data|hole}
 *       lseek(2) SEEK_DATA / SEEK_HOLE (NFSv4.2 SEEK): prints the offset or "nxio".
 *   guest-tool cfr SRC DST
 *       copy_file_range(2) of all of SRC into DST (NFSv4.2 COPY): prints the bytes.
 *   guest-tool setxattr FILE NAME VALUE / getxattr FILE NAME
 *       setxattr(2) / getxattr(2) (NFSv4.2 SETXATTR / GETXATTR): getxattr prints it.
 *
 * Lock commands open FILE (created if missing) with O_DIRECT: the Linux client
 * then asks for no delegation (OPEN4_SHARE_ACCESS_WANT_NO_DELEG).  Under a
 * delegation it would keep locks to itself and the server would see no LOCK.
 *
 * Lock commands print "locked" (exit 0) or "conflict" (exit 1) on stdout,
 * anything else is "error: ..." (exit 2).  When locked they keep the lock for
 * HOLD: a number of seconds, or a path (starting with '/') whose appearance
 * is awaited (polled every 20 ms, max 300 s).  The lock is then released
 * explicitly (LOCK_UN / F_UNLCK, so the server sees an unlock and not only a
 * close), "released" is printed, and the program exits 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <linux/falloc.h>
#include <time.h>
#include <unistd.h>

/* open for the lock commands: O_DIRECT, so that no delegation is granted (see above) */
static int open_nodeleg(const char *path)
{
	return open(path, O_RDWR | O_CREAT | O_DIRECT, 0644);
}

static int usage(void)
{
	fprintf(stderr,
		"usage: guest-tool flock FILE {x|s} HOLD\n"
		"       guest-tool fcntl FILE {w|r} START LEN HOLD\n"
		"       guest-tool rename OLD NEW\n"
		"       guest-tool falloc FILE OFFSET LEN [punch]\n"
		"       guest-tool seek FILE OFFSET {data|hole}\n"
		"       guest-tool cfr SRC DST\n"
		"       guest-tool setxattr FILE NAME VALUE | getxattr FILE NAME\n"
		"HOLD = seconds, or /path to wait for\n");
	return 2;
}

static void msleep(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static void hold(const char *how)
{
	if (how[0] == '/') {
		struct stat st;
		for (int i = 0; i < 300 * 50; i++) {
			if (stat(how, &st) == 0)
				return;
			msleep(20);
		}
		fprintf(stderr, "guest-tool: gave up waiting for %s\n", how);
		return;
	}
	long s = strtol(how, NULL, 10);
	if (s > 0)
		msleep(s * 1000);
}

static int error(const char *what, int err)
{
	printf("error: %s: %s\n", what, strerror(err));
	return 2;
}

static int lock_failed(const char *what, int err)
{
	if (err == EWOULDBLOCK || err == EAGAIN || err == EACCES) {
		printf("conflict\n");
		return 1;
	}
	return error(what, err);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	setvbuf(stdout, NULL, _IONBF, 0);

	if (strcmp(argv[1], "rename") == 0) {
		if (argc != 4)
			return usage();
		if (rename(argv[2], argv[3]) != 0) {
			return error("rename", errno);
		}
		return 0;
	}

	if (strcmp(argv[1], "falloc") == 0) {
		if (argc != 5 && argc != 6)
			return usage();
		int fd = open(argv[2], O_RDWR | O_CREAT, 0644);
		if (fd < 0)
			return error("open", errno);
		int mode = argc == 6 ? FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE : 0;
		if (fallocate(fd, mode, strtoll(argv[3], NULL, 10), strtoll(argv[4], NULL, 10)) != 0)
			return error("fallocate", errno);
		close(fd);
		return 0;
	}

	if (strcmp(argv[1], "seek") == 0) {
		if (argc != 5)
			return usage();
		int fd = open(argv[2], O_RDONLY);
		if (fd < 0)
			return error("open", errno);
		int whence = strcmp(argv[4], "hole") == 0 ? SEEK_HOLE : SEEK_DATA;
		off_t r = lseek(fd, strtoll(argv[3], NULL, 10), whence);
		if (r < 0 && errno == ENXIO) {
			printf("nxio\n");
			return 0;
		}
		if (r < 0)
			return error("lseek", errno);
		printf("%lld\n", (long long)r);
		close(fd);
		return 0;
	}

	if (strcmp(argv[1], "cfr") == 0) {
		if (argc != 4)
			return usage();
		int in = open(argv[2], O_RDONLY);
		int out = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (in < 0 || out < 0)
			return error("open", errno);
		struct stat st;
		if (fstat(in, &st) != 0)
			return error("fstat", errno);
		long long total = 0;
		while (total < st.st_size) {
			ssize_t n = copy_file_range(in, NULL, out, NULL, st.st_size - total, 0);
			if (n < 0)
				return error("copy_file_range", errno);
			if (n == 0)
				break;
			total += n;
		}
		if (close(out) != 0)
			return error("close", errno);
		printf("%lld\n", total);
		return 0;
	}

	if (strcmp(argv[1], "setxattr") == 0) {
		if (argc != 5)
			return usage();
		if (setxattr(argv[2], argv[3], argv[4], strlen(argv[4]), 0) != 0)
			return error("setxattr", errno);
		return 0;
	}

	if (strcmp(argv[1], "getxattr") == 0) {
		if (argc != 4)
			return usage();
		char buf[4096];
		ssize_t n = getxattr(argv[2], argv[3], buf, sizeof buf - 1);
		if (n < 0)
			return error("getxattr", errno);
		buf[n] = 0;
		printf("%s\n", buf);
		return 0;
	}

	if (strcmp(argv[1], "flock") == 0) {
		if (argc != 5)
			return usage();
		int fd = open_nodeleg(argv[2]);
		if (fd < 0)
			return error("open", errno);
		int op = (argv[3][0] == 's') ? LOCK_SH : LOCK_EX;
		if (flock(fd, op | LOCK_NB) != 0)
			return lock_failed("flock", errno);
		printf("locked\n");
		hold(argv[4]);
		if (flock(fd, LOCK_UN) != 0)
			return error("flock(LOCK_UN)", errno);
		printf("released\n");
		close(fd);
		return 0;
	}

	if (strcmp(argv[1], "fcntl") == 0) {
		if (argc != 7)
			return usage();
		int fd = open_nodeleg(argv[2]);
		if (fd < 0)
			return error("open", errno);
		struct flock fl;
		memset(&fl, 0, sizeof fl);
		fl.l_type = (argv[3][0] == 'r') ? F_RDLCK : F_WRLCK;
		fl.l_whence = SEEK_SET;
		fl.l_start = strtoll(argv[4], NULL, 10);
		fl.l_len = strtoll(argv[5], NULL, 10);
		if (fcntl(fd, F_SETLK, &fl) != 0)
			return lock_failed("fcntl(F_SETLK)", errno);
		printf("locked\n");
		hold(argv[6]);
		fl.l_type = F_UNLCK;
		if (fcntl(fd, F_SETLK, &fl) != 0)
			return error("fcntl(F_UNLCK)", errno);
		printf("released\n");
		close(fd);
		return 0;
	}
	return usage();
}
