/*
 * What a cgroup costs a command, outside Troupe (figures quoted in
 * docs/performance.md, "Hooks per turn"). Needs root or a delegated
 * cgroup v2 directory.
 *
 *   gcc -O2 -o /tmp/cgroup_cost tests/benches/cgroup_cost.c
 *   /tmp/cgroup_cost /sys/fs/cgroup/unified    # a cgroup v2 directory
 *
 * Mean wall time of starting `/bin/true` and waiting for it, N times in a
 * row per way (so that work the kernel defers, such as finishing a removed
 * cgroup, is charged to the way that caused it), in three rounds:
 *   fork                  no cgroup
 *   fork, fresh           a cgroup made before and removed after, not joined
 *   fork+join, reused     the child writes 0 to a reused cgroup's cgroup.procs
 *   fork+join, fresh      the same into a cgroup made and removed each time
 *   clone3 into, reused   clone3 with CLONE_INTO_CGROUP into a reused cgroup
 *   clone3 into, fresh    the same into a cgroup made and removed each time
 * and of `/bin/bash -c true` started with posix_spawn, plain and with the
 * self-join Troupe prefixes to a script (`builtin printf 0 > .../cgroup.procs`).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { N = 1000, MODES = 8, ROUNDS = 3 };

/* snprintf into a buffer, failing the program when it does not fit. */
#define FORMAT(buffer, ...)                                                  \
    do {                                                                     \
        int length_ = snprintf(buffer, sizeof buffer, __VA_ARGS__);          \
        if (length_ < 0 || (size_t)length_ >= sizeof buffer) {               \
            fprintf(stderr, "path too long\n");                              \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

static char *true_argv[] = {"/bin/true", NULL};
static char *no_env[] = {NULL};
static char *path_env[] = {"PATH=/usr/bin:/bin", NULL};

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static pid_t start(int mode, const char *cgroup, int cgroup_fd, char *join_script) {
    if (mode == 4 || mode == 5) {
        struct clone_args args;
        memset(&args, 0, sizeof args);
        args.exit_signal = SIGCHLD;
        args.flags = CLONE_INTO_CGROUP;
        args.cgroup = (uint64_t)cgroup_fd;
        long pid = syscall(SYS_clone3, &args, sizeof args);
        if (pid == 0) {
            execve(true_argv[0], true_argv, no_env);
            _exit(127);
        }
        return (pid_t)pid;
    }
    if (mode == 6 || mode == 7) {
        char *plain[] = {"/bin/bash", "-c", "true", NULL};
        char *joining[] = {"/bin/bash", "-c", join_script, NULL};
        pid_t pid;
        if (posix_spawn(&pid, "/bin/bash", NULL, NULL, mode == 6 ? plain : joining, path_env) != 0)
            return -1;
        return pid;
    }
    pid_t pid = fork();
    if (pid == 0) {
        if (mode == 2 || mode == 3) {
            char procs[4096];
            int length = snprintf(procs, sizeof procs, "%s/cgroup.procs", cgroup);
            if (length < 0 || (size_t)length >= sizeof procs)
                _exit(124);
            int fd = open(procs, O_WRONLY);
            if (fd < 0 || write(fd, "0", 1) != 1)
                _exit(125);
            close(fd);
        }
        execve(true_argv[0], true_argv, no_env);
        _exit(127);
    }
    return pid;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CGROUP_V2_DIRECTORY\n", argv[0]);
        return 2;
    }
    static const char *names[MODES] = {
        "fork", "fork, fresh", "fork+join, reused", "fork+join, fresh",
        "clone3 into, reused", "clone3 into, fresh", "bash, posix_spawn",
        "bash, posix_spawn, self-join"};
    char base[4096], reused[4096], join_script[8192];
    FORMAT(base, "%s/cgroup-cost-%d", argv[1], (int)getpid());
    FORMAT(reused, "%s/reused", base);
    if (mkdir(base, 0755) != 0 || mkdir(reused, 0755) != 0) {
        perror("mkdir");
        return 1;
    }
    FORMAT(join_script, "builtin printf 0 > '%s/cgroup.procs' || exit 125; true", reused);
    for (int round = 1; round <= ROUNDS; round++) {
    printf("round %d of %d, mean of %d:\n", round, ROUNDS, N);
    for (int mode = 0; mode < MODES; mode++) {
        double total = 0;
        for (int i = 0; i < N; i++) {
            int fresh = mode == 1 || mode == 3 || mode == 5;
            char dir[4096];
            double started = now_ms();
            if (fresh) {
                FORMAT(dir, "%s/c%d", base, i);
                if (mkdir(dir, 0755) != 0) {
                    perror("mkdir");
                    return 1;
                }
            } else {
                FORMAT(dir, "%s", reused);
            }
            int fd = open(dir, O_RDONLY | O_DIRECTORY);
            pid_t pid = start(mode, dir, fd, join_script);
            int status = 0;
            if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
                WEXITSTATUS(status) != 0) {
                fprintf(stderr, "%s: the child failed (status %d)\n", names[mode], status);
                return 1;
            }
            close(fd);
            if (fresh && rmdir(dir) != 0) {
                perror("rmdir");
                return 1;
            }
            total += now_ms() - started;
        }
        printf("  %-30s %.3f ms\n", names[mode], total / N);
    }
    }
    rmdir(reused);
    rmdir(base);
    return 0;
}
