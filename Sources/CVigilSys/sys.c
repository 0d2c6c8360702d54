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

int vigil_memfd_create(const char *name) { return memfd_create(name, MFD_CLOEXEC); }

int vigil_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

int vigil_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

int vigil_accept_cloexec(int fd) { return accept4(fd, NULL, NULL, SOCK_CLOEXEC); }

int vigil_seqpacket_pair(int fds[2]) { return socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds); }

int vigil_set_parent_death_signal(int signal) { return prctl(PR_SET_PDEATHSIG, (unsigned long)signal, 0, 0, 0); }

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
