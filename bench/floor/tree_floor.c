/*
 * tree_floor -- the "floor" for a multicast + reduction round trip over a
 * process tree.
 *
 * A balanced tree of processes connected by Unix-domain socketpairs.  Every
 * message is a raw 8-byte u64 in host byte order: no framing, no headers, no
 * serialisation, no event loop (except the optional pipelined mode, see
 * below).  Whatever an overlay network such as vargr costs on top of this is
 * its own overhead.
 *
 * Usage: tree_floor LEVELS ITERS [WARMUP] [--window W]
 *
 *   LEVELS   node counts per level, e.g. 1x4x16 (root, 4 internal, 16 leaves)
 *            or 1x16 (flat).  First count must be 1, each count a multiple
 *            of the previous one.
 *   ITERS    timed waves.
 *   WARMUP   untimed waves before the timed ones (default ITERS/10).
 *   --window W  pipelined mode: the root keeps W waves outstanding.
 *
 * Protocol (per wave k = 1, 2, ...):
 *   root     writes k to every child
 *   internal reads k from parent, writes k to every child,
 *            reads one u64 from every child, writes their sum to parent
 *   leaf     reads k, writes k back
 *   root     reads one u64 from every child, checks sum == k * leaves
 * A value of 0 from the parent is the shutdown sentinel: it is forwarded
 * down, then every process closes its sockets, waitpid()s its children and
 * exits.  EOF from the parent (parent died) makes a process exit non-zero,
 * so nothing is ever orphaned for long.
 *
 * Startup: before the first wave, each leaf writes 1 to its parent once it
 * is running; internal nodes sum their children's "ready" counts (after
 * forking all of them) and forward the sum; the root's startup time is from
 * just before its first fork() until it has read a total equal to the
 * number of leaves.
 *
 * Pipelined mode (--window W): the root writes waves k+1..k+W before it
 * waits for wave k+1's replies and writes one new wave per completed wave.
 * Internal nodes then use poll() so that they forward waves downwards while
 * earlier waves are still being reduced (with a plain blocking loop an
 * internal node would serialise its subtree to one wave at a time).  Leaves
 * stay a blocking read/write loop.  The rtt_* figures in this mode are
 * per-wave latencies from the root's write to the root's completed
 * reduction, i.e. they include queueing behind the other W-1 waves.
 *
 * Output: one JSON object on stdout.  Errors: message on stderr, exit 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_LEVELS 16
#define MAX_NODES 20000
#define MAX_WINDOW 128 /* keeps W * per-skb overhead well under SO_SNDBUF */

static int nlevels;
static unsigned long counts[MAX_LEVELS];
static unsigned long window_w; /* 0 = ping-pong mode */

/* Per-process state. */
static int depth;          /* 0 = root */
static int parent_fd = -1; /* -1 at the root */
static int nchild;
static int child_fd[MAX_NODES];
static pid_t child_pid[MAX_NODES];

static void reap_children(int *bad)
{
    for (int i = 0; i < nchild; i++) {
        if (child_fd[i] >= 0) {
            close(child_fd[i]);
            child_fd[i] = -1;
        }
    }
    for (int i = 0; i < nchild; i++) {
        if (child_pid[i] <= 0)
            continue;
        int st;
        pid_t r;
        do
            r = waitpid(child_pid[i], &st, 0);
        while (r < 0 && errno == EINTR);
        if (r < 0) {
            fprintf(stderr, "tree_floor[%d depth %d]: waitpid: %s\n",
                    (int)getpid(), depth, strerror(errno));
            *bad = 1;
        } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            if (WIFSIGNALED(st))
                fprintf(stderr, "tree_floor[%d depth %d]: child %d killed by signal %d\n",
                        (int)getpid(), depth, (int)child_pid[i], WTERMSIG(st));
            else
                fprintf(stderr, "tree_floor[%d depth %d]: child %d exited with status %d\n",
                        (int)getpid(), depth, (int)child_pid[i], WEXITSTATUS(st));
            *bad = 1;
        }
        child_pid[i] = 0;
    }
}

/* Root only: it is a child subreaper, so descendants orphaned by an
 * internal node that was killed from outside are reparented to it; they see
 * EOF on their parent socket and exit, and are reaped here. */
static void reap_orphans(void)
{
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
        ;
}

/* Print an error, close our sockets (children see EOF and exit), reap the
 * children, exit 1.  Works in every process of the tree. */
__attribute__((noreturn, format(printf, 1, 2)))
static void die(const char *fmt, ...)
{
    int saved = errno;
    va_list ap;
    fprintf(stderr, "tree_floor[%d depth %d]: ", (int)getpid(), depth);
    va_start(ap, fmt);
    errno = saved;
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (parent_fd >= 0)
        close(parent_fd);
    int bad = 0;
    reap_children(&bad);
    if (depth == 0) {
        reap_orphans();
        exit(1);
    }
    _exit(1);
}

/* Read exactly 8 bytes.  Returns 0 on success, -1 on EOF (no bytes). */
static int read_u64(int fd, uint64_t *v)
{
    char *p = (char *)v;
    size_t got = 0;
    while (got < sizeof *v) {
        ssize_t n = read(fd, p + got, sizeof *v - got);
        if (n > 0) {
            got += (size_t)n;
        } else if (n == 0) {
            if (got == 0)
                return -1;
            errno = EPROTO;
            die("short read: EOF after %zu of 8 bytes on fd %d", got, fd);
        } else if (errno != EINTR) {
            die("read fd %d: %s", fd, strerror(errno));
        }
    }
    return 0;
}

static void read_u64_or_die(int fd, uint64_t *v, const char *who)
{
    if (read_u64(fd, v) < 0)
        die("unexpected EOF from %s (fd %d)", who, fd);
}

static void write_u64(int fd, uint64_t v)
{
    const char *p = (const char *)&v;
    size_t put = 0;
    while (put < sizeof v) {
        ssize_t n = write(fd, p + put, sizeof v - put);
        if (n > 0)
            put += (size_t)n;
        else if (n < 0 && errno != EINTR)
            die("write fd %d: %s", fd, strerror(errno));
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        die("clock_gettime: %s", strerror(errno));
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void node_main(void); /* runs a non-root node, never returns */

/* Fork this node's children (one socketpair each).  In the child, this
 * function does not return: it runs node_main() for the next level. */
static void spawn_children(void)
{
    nchild = (depth + 1 < nlevels) ? (int)(counts[depth + 1] / counts[depth]) : 0;
    for (int i = 0; i < nchild; i++) {
        child_fd[i] = -1;
        child_pid[i] = 0;
    }
    for (int i = 0; i < nchild; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
            die("socketpair: %s", strerror(errno));
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            int e = errno;
            close(sv[0]);
            close(sv[1]);
            errno = e;
            die("fork: %s", strerror(errno));
        }
        if (pid == 0) {
            /* Child: drop everything that belongs to the parent. */
            int inherited = i;
            nchild = 0;
            close(sv[0]);
            if (parent_fd >= 0)
                close(parent_fd);
            for (int j = 0; j < inherited; j++)
                close(child_fd[j]);
            parent_fd = sv[1];
            depth++;
            node_main();
        }
        close(sv[1]);
        child_fd[i] = sv[0];
        child_pid[i] = pid;
    }
}

/* Pipelined internal node: forward waves down as soon as they arrive,
 * reduce them as the children's replies arrive (per child in order). */
static void internal_poll_loop(void)
{
    struct pollfd *pfd = calloc((size_t)nchild + 1, sizeof *pfd);
    uint64_t *got = calloc((size_t)nchild, sizeof *got);
    uint64_t ring[MAX_WINDOW];
    if (!pfd || !got)
        die("out of memory");
    pfd[0].fd = parent_fd;
    pfd[0].events = POLLIN;
    for (int i = 0; i < nchild; i++) {
        pfd[i + 1].fd = child_fd[i];
        pfd[i + 1].events = POLLIN;
    }
    uint64_t recvd = 0, sent_up = 0;
    for (;;) {
        int r = poll(pfd, (nfds_t)nchild + 1, -1);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            die("poll: %s", strerror(errno));
        }
        if (pfd[0].revents) {
            uint64_t v;
            read_u64_or_die(parent_fd, &v, "parent");
            if (v == 0) {
                if (recvd != sent_up)
                    die("sentinel with %" PRIu64 " waves outstanding", recvd - sent_up);
                for (int i = 0; i < nchild; i++)
                    write_u64(child_fd[i], 0);
                break;
            }
            if (recvd - sent_up >= window_w)
                die("more than %lu waves outstanding", window_w);
            ring[recvd % window_w] = 0;
            recvd++;
            for (int i = 0; i < nchild; i++)
                write_u64(child_fd[i], v);
        }
        for (int i = 0; i < nchild; i++) {
            if (!pfd[i + 1].revents)
                continue;
            uint64_t v;
            read_u64_or_die(child_fd[i], &v, "child");
            if (got[i] >= recvd)
                die("unsolicited reply from child %d", i);
            ring[got[i] % window_w] += v;
            got[i]++;
        }
        uint64_t done = recvd;
        for (int i = 0; i < nchild; i++)
            if (got[i] < done)
                done = got[i];
        while (sent_up < done) {
            write_u64(parent_fd, ring[sent_up % window_w]);
            sent_up++;
        }
    }
    free(pfd);
    free(got);
}

static void node_main(void)
{
    spawn_children();

    /* Ready report. */
    uint64_t ready = 0;
    if (nchild == 0) {
        ready = 1;
    } else {
        for (int i = 0; i < nchild; i++) {
            uint64_t v;
            read_u64_or_die(child_fd[i], &v, "child (ready)");
            ready += v;
        }
    }
    write_u64(parent_fd, ready);

    if (nchild == 0) {
        for (;;) {
            uint64_t v;
            read_u64_or_die(parent_fd, &v, "parent");
            if (v == 0)
                break;
            write_u64(parent_fd, v);
        }
    } else if (window_w > 0) {
        internal_poll_loop();
    } else {
        for (;;) {
            uint64_t v;
            read_u64_or_die(parent_fd, &v, "parent");
            for (int i = 0; i < nchild; i++)
                write_u64(child_fd[i], v);
            if (v == 0)
                break;
            uint64_t sum = 0;
            for (int i = 0; i < nchild; i++) {
                uint64_t c;
                read_u64_or_die(child_fd[i], &c, "child");
                sum += c;
            }
            write_u64(parent_fd, sum);
        }
    }

    /* Shutdown: the sentinel has been forwarded; close and reap. */
    close(parent_fd);
    parent_fd = -1;
    int bad = 0;
    reap_children(&bad);
    _exit(bad ? 1 : 0);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: tree_floor LEVELS ITERS [WARMUP] [--window W]\n"
            "  LEVELS  e.g. 1x4x16 or 1x16 (first 1, each a multiple of the previous)\n"
            "  ITERS   timed waves; WARMUP untimed waves first (default ITERS/10)\n"
            "  --window W  keep W waves outstanding (1..%d), report waves/s\n",
            MAX_WINDOW);
    exit(2);
}

static int parse_ulong(const char *s, unsigned long *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static void parse_levels(const char *s)
{
    const char *p = s;
    nlevels = 0;
    for (;;) {
        char *end;
        if (*p < '0' || *p > '9')
            goto bad;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (errno || v == 0 || nlevels == MAX_LEVELS)
            goto bad;
        counts[nlevels++] = v;
        if (*end == '\0')
            break;
        if (*end != 'x')
            goto bad;
        p = end + 1;
    }
    if (nlevels < 2 || counts[0] != 1)
        goto bad;
    unsigned long total = 0;
    for (int i = 0; i < nlevels; i++) {
        if (i > 0 && counts[i] % counts[i - 1] != 0)
            goto bad;
        total += counts[i];
        if (total > MAX_NODES)
            goto bad;
    }
    return;
bad:
    fprintf(stderr, "tree_floor: bad LEVELS '%s' (want e.g. 1x4x16: starts with 1, "
                    "at least two levels, each a multiple of the previous, <= %d nodes)\n",
            s, MAX_NODES);
    exit(2);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile, result in microseconds. */
static double pct_us(const uint64_t *sorted, size_t n, double p)
{
    size_t rank = (size_t)ceil(p * (double)n);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return (double)sorted[rank - 1] / 1e3;
}

int main(int argc, char **argv)
{
    const char *pos[3];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--window") == 0) {
            if (i + 1 >= argc || parse_ulong(argv[i + 1], &window_w) != 0 ||
                window_w < 1 || window_w > MAX_WINDOW) {
                fprintf(stderr, "tree_floor: --window needs an integer in 1..%d\n", MAX_WINDOW);
                exit(2);
            }
            i++;
        } else if (npos < 3) {
            pos[npos++] = argv[i];
        } else {
            usage();
        }
    }
    if (npos < 2)
        usage();
    parse_levels(pos[0]);
    unsigned long iters, warmup;
    if (parse_ulong(pos[1], &iters) != 0 || iters == 0) {
        fprintf(stderr, "tree_floor: bad ITERS '%s'\n", pos[1]);
        exit(2);
    }
    warmup = iters / 10;
    if (npos == 3 && parse_ulong(pos[2], &warmup) != 0) {
        fprintf(stderr, "tree_floor: bad WARMUP '%s'\n", pos[2]);
        exit(2);
    }
    const uint64_t leaves = counts[nlevels - 1];
    const uint64_t total = (uint64_t)iters + warmup;

    /* EPIPE instead of death if a peer vanishes; inherited by the tree. */
    signal(SIGPIPE, SIG_IGN);
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        die("prctl(PR_SET_CHILD_SUBREAPER): %s", strerror(errno));

    uint64_t *lat = malloc(iters * sizeof *lat);
    uint64_t *tsend = window_w ? malloc((size_t)total * sizeof *tsend) : NULL;
    if (!lat || (window_w && !tsend))
        die("out of memory");

    /* Startup. */
    uint64_t t0 = now_ns();
    spawn_children();
    uint64_t ready = 0;
    for (int i = 0; i < nchild; i++) {
        uint64_t v;
        read_u64_or_die(child_fd[i], &v, "child (ready)");
        ready += v;
    }
    uint64_t t1 = now_ns();
    if (ready != leaves)
        die("ready count %" PRIu64 " != %" PRIu64 " leaves", ready, leaves);
    double startup_s = (double)(t1 - t0) / 1e9;

    double waves_per_s = -1;
    if (window_w == 0) {
        for (uint64_t k = 1; k <= total; k++) {
            uint64_t a = now_ns();
            for (int i = 0; i < nchild; i++)
                write_u64(child_fd[i], k);
            uint64_t sum = 0;
            for (int i = 0; i < nchild; i++) {
                uint64_t v;
                read_u64_or_die(child_fd[i], &v, "child");
                sum += v;
            }
            uint64_t b = now_ns();
            if (sum != k * leaves)
                die("wave %" PRIu64 ": sum %" PRIu64 " != %" PRIu64, k, sum, k * leaves);
            if (k > warmup)
                lat[k - warmup - 1] = b - a;
        }
    } else {
        uint64_t next = 1, tstart = 0, tend = 0;
        for (; next <= total && next <= window_w; next++) {
            tsend[next - 1] = now_ns();
            for (int i = 0; i < nchild; i++)
                write_u64(child_fd[i], next);
        }
        if (warmup == 0)
            tstart = now_ns(); /* no warmup: throughput from the first send */
        for (uint64_t k = 1; k <= total; k++) {
            uint64_t sum = 0;
            for (int i = 0; i < nchild; i++) {
                uint64_t v;
                read_u64_or_die(child_fd[i], &v, "child");
                sum += v;
            }
            uint64_t b = now_ns();
            if (sum != k * leaves)
                die("wave %" PRIu64 ": sum %" PRIu64 " != %" PRIu64, k, sum, k * leaves);
            if (k > warmup)
                lat[k - warmup - 1] = b - tsend[k - 1];
            if (k == warmup)
                tstart = b;
            if (k == total)
                tend = b;
            if (next <= total) {
                tsend[next - 1] = now_ns();
                for (int i = 0; i < nchild; i++)
                    write_u64(child_fd[i], next);
                next++;
            }
        }
        waves_per_s = (double)iters / ((double)(tend - tstart) / 1e9);
    }

    /* Shutdown. */
    for (int i = 0; i < nchild; i++)
        write_u64(child_fd[i], 0);
    int bad = 0;
    reap_children(&bad);
    reap_orphans();
    if (bad) {
        fprintf(stderr, "tree_floor: some processes failed\n");
        return 1;
    }

    qsort(lat, iters, sizeof *lat, cmp_u64);
    double sum_us = 0;
    for (unsigned long i = 0; i < iters; i++)
        sum_us += (double)lat[i] / 1e3;

    printf("{\"levels\":\"%s\",\"backends\":%" PRIu64 ",\"iters\":%lu,\"warmup\":%lu,"
           "\"window\":%lu,\"startup_s\":%.6f,"
           "\"rtt_median_us\":%.2f,\"rtt_p90_us\":%.2f,\"rtt_p99_us\":%.2f,"
           "\"rtt_mean_us\":%.2f,\"waves_per_s\":",
           pos[0], leaves, iters, warmup, window_w, startup_s,
           pct_us(lat, iters, 0.50), pct_us(lat, iters, 0.90), pct_us(lat, iters, 0.99),
           sum_us / (double)iters);
    if (waves_per_s < 0)
        printf("null}\n");
    else
        printf("%.1f}\n", waves_per_s);
    free(lat);
    free(tsend);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "tree_floor: writing stdout failed\n");
        return 1;
    }
    return 0;
}
