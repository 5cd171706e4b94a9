/*
 * fsync_eio.so: makes real fsync(2)/fdatasync(2) calls fail with EIO, for the chaos suite.
 *
 * Loaded with LD_PRELOAD into the streaming job's processes (spark-submit's environment
 * reaches the JVM, the Python driver and the Python workers). Only calls on file
 * descriptors whose path (/proc/self/fd/N) is CHAOS_EIO_PREFIX or below it count; the
 * CHAOS_EIO_AT-th such call in a process, and the CHAOS_EIO_COUNT - 1 after it, fail
 * with EIO without syncing anything.
 *
 * CHAOS_EIO_DROP=1 also models what Linux may do after a failed writeback ("fsyncgate"):
 * the dirty pages are dropped and marked clean, so a later fsync succeeds without
 * writing them. Here the failing regular file is truncated to 0 bytes, i.e. all its
 * unsynced data is gone (the storage layer writes each file once before its first
 * fsync); a layer that went on to commit such a file would commit an empty one, which the
 * chaos verification sees.
 *
 * CHAOS_EIO_CMDLINE, when set, limits all this to processes whose command line contains
 * it (e.g. "pyspark.daemon": the Python workers of executors mode, which fork from it).
 *
 * Each failure is told on stderr: "chaos-eio: fsync #N of PATH fails with EIO ...".
 *
 * Build: cc -shared -fPIC -O2 -o fsync_eio.so fsync_eio.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static const char *prefix;
static size_t prefix_len;
static long fail_at = 0;
static long fail_count = 1;
static int drop = 0;
static long calls = 0;

__attribute__((constructor)) static void chaos_eio_init(void) {
    const char *v;
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    prefix = getenv("CHAOS_EIO_PREFIX");
    prefix_len = prefix ? strlen(prefix) : 0;
    while (prefix_len > 1 && prefix[prefix_len - 1] == '/')
        prefix_len--;
    if ((v = getenv("CHAOS_EIO_AT")) != NULL)
        fail_at = atol(v);
    if ((v = getenv("CHAOS_EIO_COUNT")) != NULL)
        fail_count = atol(v);
    if ((v = getenv("CHAOS_EIO_DROP")) != NULL)
        drop = atoi(v);
    if ((v = getenv("CHAOS_EIO_CMDLINE")) != NULL && *v) {
        char cmd[4096];
        ssize_t n = 0;
        int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            n = read(fd, cmd, sizeof cmd - 1);
            close(fd);
        }
        for (ssize_t i = 0; i < n; i++)
            if (cmd[i] == '\0')
                cmd[i] = ' ';
        cmd[n > 0 ? n : 0] = '\0';
        if (strstr(cmd, v) == NULL)
            prefix_len = 0; /* not one of the processes to fail */
    }
}

/* Whether this call on fd must fail (and, with drop, drop the file's data). */
static int chaos_eio_fails(int fd) {
    char link[64], path[4096];
    ssize_t n;
    long k;
    struct stat st;
    int regular;

    if (prefix_len == 0 || fail_at <= 0)
        return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof path - 1);
    if (n <= 0)
        return 0;
    path[n] = '\0';
    if (strncmp(path, prefix, prefix_len) != 0 ||
        (path[prefix_len] != '\0' && path[prefix_len] != '/'))
        return 0;
    k = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
    if (k < fail_at || k >= fail_at + fail_count)
        return 0;
    regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (drop && regular && ftruncate(fd, 0) != 0)
        regular = 0;
    dprintf(2, "chaos-eio: fsync #%ld of %s fails with EIO (pid %d)%s\n", k, path,
            (int)getpid(), drop && regular ? ", its unsynced data dropped" : "");
    return 1;
}

int fsync(int fd) {
    if (chaos_eio_fails(fd)) {
        errno = EIO;
        return -1;
    }
    return real_fsync(fd);
}

int fdatasync(int fd) {
    if (chaos_eio_fails(fd)) {
        errno = EIO;
        return -1;
    }
    return real_fdatasync(fd);
}
