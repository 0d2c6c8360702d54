#define _GNU_SOURCE
#include "vigil_sys.h"

#include <poll.h>
#include <sys/socket.h>

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <errno.h>
#include <time.h>
#include <spawn.h>
#include <unistd.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>

int vigil_memfd_create(const char *name) { return memfd_create(name, MFD_CLOEXEC); }

int vigil_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

int vigil_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

int vigil_accept_cloexec(int fd) { return accept4(fd, NULL, NULL, SOCK_CLOEXEC); }

int vigil_seqpacket_pair(int fds[2]) { return socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds); }

int vigil_set_parent_death_signal(int signal) { return prctl(PR_SET_PDEATHSIG, (unsigned long)signal, 0, 0, 0); }

int vigil_name_thread(const char *name) { return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0); }

int vigil_child_ended(pid_t pid, int block) {
    siginfo_t info;
    int r;
    do {
        info.si_pid = 0;
        r = waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT | (block ? 0 : WNOHANG));
    } while (r < 0 && errno == EINTR);
    if (r < 0)
        return -1;
    return info.si_pid == pid ? 1 : 0;
}

int vigil_pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

int vigil_poll_ns(void *fds, unsigned long count, int64_t timeout_ns) {
    if (timeout_ns < 0)
        return ppoll((struct pollfd *)fds, (nfds_t)count, NULL, NULL);
    struct timespec ts = { (time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000) };
    return ppoll((struct pollfd *)fds, (nfds_t)count, &ts, NULL);
}

int vigil_limit_data(pid_t pid, uint64_t bytes) {
    struct rlimit limit = { (rlim_t)bytes, (rlim_t)bytes };
    return prlimit(pid, RLIMIT_DATA, &limit, NULL);
}

int vigil_spawn_closefrom(void *actions, int from) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    return posix_spawn_file_actions_addclosefrom_np((posix_spawn_file_actions_t *)actions, from);
#else
    (void)actions;
    (void)from;
    return ENOSYS;
#endif
}

long vigil_send_fds(int sock, const void *buf, unsigned long len, const int *fds, int count) {
    if (count < 0 || count > 8) {
        errno = EINVAL;
        return -1;
    }
    union {
        char bytes[CMSG_SPACE(8 * sizeof(int))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = { (void *)buf, len };
    struct msghdr msg = { 0 };
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (count > 0) {
        msg.msg_control = control.bytes;
        msg.msg_controllen = CMSG_SPACE((size_t)count * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)count * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)count * sizeof(int));
    }
    ssize_t r;
    do {
        r = sendmsg(sock, &msg, MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    return (long)r;
}

long vigil_recv_fds(int sock, void *buf, unsigned long cap, int *fds, int max, int *count) {
    union {
        char bytes[CMSG_SPACE(16 * sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec iov = { buf, cap };
    struct msghdr msg = { 0 };
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.bytes;
    msg.msg_controllen = sizeof control.bytes;
    ssize_t r;
    do {
        r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    } while (r < 0 && errno == EINTR);
    *count = 0;
    if (r < 0)
        return -1;
    int got = 0, over = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        int *in = (int *)CMSG_DATA(c);
        for (int i = 0; i < n; i++) {
            if (got < max)
                fds[got++] = in[i];
            else {
                close(in[i]);
                over = 1;
            }
        }
    }
    if (over) {
        for (int i = 0; i < got; i++)
            close(fds[i]);
        errno = EMSGSIZE;
        return -1;
    }
    *count = got;
    return (long)r;
}

/* The variable's value where exec put it (environ points into the area
 * /proc/PID/environ shows), or NULL when it is missing or not `length` long. */
static char *environment_value(const char *name, size_t length) {
    extern char **environ;
    size_t n = strlen(name);
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return strlen(*e + n + 1) == length ? *e + n + 1 : NULL;
    }
    return NULL;
}

/* In a child between fork and exec: `sources[i]` becomes descriptor
 * `targets[i]` (not close-on-exec), and every descriptor above `highest`
 * (at least every target) is closed. Each source is first copied above
 * every target, so none is overwritten before it is copied. -1 on failure. */
static int arrange_descriptors(const int *sources, const int *targets, int count, int highest) {
    int moved[16];
    if (count > 16)
        return -1;
    for (int i = 0; i < count; i++) {
        moved[i] = fcntl(sources[i], F_DUPFD_CLOEXEC, highest + 1);
        if (moved[i] < 0)
            return -1;
    }
    for (int i = 0; i < count; i++)
        if (dup2(moved[i], targets[i]) < 0)
            return -1;
    long closed = -1;
#ifdef SYS_close_range
    closed = syscall(SYS_close_range, (unsigned)highest + 1, ~0U, 0);
#endif
    if (closed < 0) {
        for (int fd = highest + 1; fd < 65536; fd++)
            close(fd);
    }
    return 0;
}

int vigil_spawn_as(const char *path, char *const argv[], char *const envp[], const int *sources, const int *targets,
                   int count, int new_group, uid_t uid, gid_t gid, const gid_t *groups, int group_count, pid_t *pid) {
    if (count < 0 || count > 15 || group_count < 0) {
        return EINVAL;
    }
    int highest = 2;
    for (int i = 0; i < count; i++)
        if (targets[i] > highest)
            highest = targets[i];
    /* The exec's errno comes back on this pipe; a successful exec closes it. */
    int report[2];
    if (pipe2(report, O_CLOEXEC) < 0)
        return errno;
    int all_sources[16], all_targets[16];
    memcpy(all_sources, sources, (size_t)count * sizeof(int));
    memcpy(all_targets, targets, (size_t)count * sizeof(int));
    all_sources[count] = report[1];
    all_targets[count] = highest + 1;
    /* Every signal blocked across the fork, so no handler of the host's
     * runs in the child before its dispositions are reset. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t child = fork();
    if (child == 0) {
        int failed_errno = 0;
        /* The raw call, so that glibc's own signals (32 and 33, which its
         * sigaction refuses) are reset too. */
        struct {
            void *handler;
            unsigned long flags;
            void *restorer;
            unsigned long mask;
        } dfl = { SIG_DFL, 0, NULL, 0 };
        for (int sig = 1; sig < 65; sig++)
            if (sig != SIGKILL && sig != SIGSTOP)
                syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
        int out = highest + 1;
        if (arrange_descriptors(all_sources, all_targets, count + 1, highest + 1) < 0)
            failed_errno = errno ? errno : EBADF, out = report[1];
        else
            fcntl(out, F_SETFD, FD_CLOEXEC);
        if (!failed_errno && new_group && setpgid(0, 0) < 0)
            failed_errno = errno;
        /* The raw system calls: glibc's wrappers would signal every thread
         * to change its ids too, and this child has one. Groups first, then
         * the group, then the user (after which nothing else may change). */
        if (!failed_errno && syscall(SYS_setgroups, (size_t)group_count, groups) < 0)
            failed_errno = errno;
        if (!failed_errno && syscall(SYS_setresgid, gid, gid, gid) < 0)
            failed_errno = errno;
        if (!failed_errno && syscall(SYS_setresuid, uid, uid, uid) < 0)
            failed_errno = errno;
        if (!failed_errno) {
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, NULL);
            execve(path, argv, envp);
            failed_errno = errno;
        }
        ssize_t ignored = write(out, &failed_errno, sizeof failed_errno);
        (void)ignored;
        _exit(127);
    }
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(report[1]);
    if (child < 0) {
        close(report[0]);
        return fork_errno;
    }
    int child_errno = 0;
    ssize_t n;
    do {
        n = read(report[0], &child_errno, sizeof child_errno);
    } while (n < 0 && errno == EINTR);
    close(report[0]);
    if (n == (ssize_t)sizeof child_errno) {
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
        }
        return child_errno;
    }
    *pid = child;
    return 0;
}

int vigil_fork_sibling(const int *sources, const int *targets, int count, int new_group,
                       const char *name, const char *value, char *title, unsigned long title_room,
                       const char *command, unsigned long command_length) {
    char *slot = environment_value(name, strlen(value));
    if (!slot || count < 0) {
        errno = EINVAL;
        return -1;
    }
    int highest = 2;
    for (int i = 0; i < count; i++)
        if (targets[i] > highest)
            highest = targets[i];
    /* The raw system call: glibc's fork() has no CLONE_PARENT. Its atfork
     * handlers are not run, which a process with one thread and no lock
     * held does not need; the child's copy of glibc keeps the template's
     * thread id in its thread descriptor (glibc reads the kernel's where it
     * matters: raise, pthread_kill of itself). */
    long pid = syscall(SYS_clone, (unsigned long)(CLONE_PARENT | SIGCHLD), 0, 0, 0, 0);
    if (pid != 0)
        return (int)pid;
    if (arrange_descriptors(sources, targets, count, highest) < 0)
        _exit(127);
    if (new_group && setpgid(0, 0) < 0)
        _exit(127);
    memcpy(slot, value, strlen(value));
    if (title && title_room > 0) {
        unsigned long n = command_length < title_room ? command_length : title_room - 1;
        memset(title, 0, title_room);
        memcpy(title, command, n);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    return 0;
}

static volatile int exit_is_ours;

static void foreign_exit(int status, void *arg) {
    (void)arg;
    if (exit_is_ours)
        return;
    char text[400];
    int n = snprintf(text, sizeof text,
                     "vigil: something in vigil's process called exit(%d): a plugin running in process "
                     "(isolation: none), or a library it loaded; vigil ends with status %d, not %d. Run plugins "
                     "you did not write with isolation: process.\n",
                     status, VIGIL_EXIT_FOREIGN, status);
    if (n > 0) {
        ssize_t ignored = write(2, text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
        (void)ignored;
    }
    _exit(VIGIL_EXIT_FOREIGN);
}

void vigil_guard_exit(void) { on_exit(foreign_exit, NULL); }

void vigil_exit_is_ours(void) { exit_is_ours = 1; }
