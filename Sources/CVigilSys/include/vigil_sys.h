/* vigil_sys.h — the Linux calls Swift's Glibc module does not declare
 * (they need _GNU_SOURCE), and atomics on memory shared with another
 * process (the isolation runner's ring), which Swift's `Atomic` cannot
 * address. Nothing here is part of the plugin contract. */
#ifndef VIGIL_SYS_H
#define VIGIL_SYS_H

#include <stdint.h>
#include <sys/types.h>

/** memfd_create(name, MFD_CLOEXEC); -1 with errno on failure. */
int vigil_memfd_create(const char *name);

/** eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK). */
int vigil_eventfd(void);

/** pipe2(fds, O_CLOEXEC). */
int vigil_pipe_cloexec(int fds[2]);

/** accept4(fd, NULL, NULL, SOCK_CLOEXEC). */
int vigil_accept_cloexec(int fd);

/** socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds). */
int vigil_seqpacket_pair(int fds[2]);

/** prctl(PR_SET_PDEATHSIG, signal): this process gets `signal` when the
 *  thread that created it ends. */
int vigil_set_parent_death_signal(int signal);

/* Names the calling thread for the kernel (comm: its first 15 bytes);
 * 0, or -1 with errno. */
int vigil_name_thread(const char *name);

/** Whether child `pid` has ended, without reaping it (waitid(P_PID, pid,
 *  WEXITED | WNOWAIT), with WNOHANG unless `block`): 1 ended (a zombie,
 *  its pid still its own), 0 not yet, -1 with errno (not our child). */
int vigil_child_ended(pid_t pid, int block);

/** pidfd_open(pid, 0) through syscall(2); -1 with errno where the kernel has none. */
int vigil_pidfd_open(pid_t pid);

/** poll(2) with a timeout in nanoseconds (ppoll; negative: no limit). */
int vigil_poll_ns(void *fds, unsigned long count, int64_t timeout_ns);

/** prlimit(pid, RLIMIT_DATA, {bytes, bytes}, NULL): caps another process's
 *  data (heap and private writable mappings); -1 with errno on failure. */
int vigil_limit_data(pid_t pid, uint64_t bytes);

/* ThreadSanitizer does not see a Synchronization.Mutex taken on its slow
 * path: the futex wait and the compare-and-swap after it are in
 * libswiftSynchronization, which is not instrumented, so to it a section
 * entered that way is guarded by nothing, and a contended queue reports
 * races that are not there. These tell it, with the lock held, that the
 * section begins and ends. The runtime's functions are weak: in a build
 * without ThreadSanitizer they are null and these do nothing (the Swift
 * side is not built with a feature test the importer would see). */
extern void __tsan_acquire(void *address) __attribute__((weak));
extern void __tsan_release(void *address) __attribute__((weak));
static inline void vigil_tsan_acquire(void *address) { if (__tsan_acquire) __tsan_acquire(address); }
static inline void vigil_tsan_release(void *address) { if (__tsan_release) __tsan_release(address); }

/* Atomics on shared memory. Acquire loads and release stores order the
 * ring's data against its positions; the full fence orders a "sleeping"
 * flag against a position (the two sides' check-then-sleep). */
static inline uint64_t vigil_load_acquire_u64(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void vigil_store_release_u64(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline uint32_t vigil_load_acquire_u32(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void vigil_store_release_u32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline uint32_t vigil_exchange_u32(uint32_t *p, uint32_t v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
static inline void vigil_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* Adds to `actions` (a posix_spawn_file_actions_t *) the closing of every
 * descriptor from `from` up in the child; ENOSYS where the C library has no
 * posix_spawn_file_actions_addclosefrom_np (before glibc 2.34). */
int vigil_spawn_closefrom(void *actions, int from);

/** Starts `path` as another user, which posix_spawn cannot: fork, then in
 *  the child every signal at its default disposition, `sources[i]` as its
 *  descriptor `targets[i]` (at most 15) and every descriptor above them
 *  closed, a process group of its own when `new_group`, the supplementary
 *  groups `groups`, then gid and uid (real, effective and saved), no signal
 *  blocked, and execve. 0 with the child's pid in `*pid`, or the errno of
 *  the step that failed, in the child too (the child is then reaped). */
int vigil_spawn_as(const char *path, char *const argv[], char *const envp[], const int *sources, const int *targets,
                   int count, int new_group, uid_t uid, gid_t gid, const gid_t *groups, int group_count, pid_t *pid);

/* The runner template (RunnerTemplate.swift): a prepared `vigil` that forks
 * plugin runners for the host, so that they share its pages. */

/** sendmsg(2) of `len` bytes on a SEQPACKET socket with `count` descriptors
 *  attached (SCM_RIGHTS, at most 8); -1 with errno on failure. */
long vigil_send_fds(int sock, const void *buf, unsigned long len, const int *fds, int count);

/** recvmsg(2) of one message into `buf`, its descriptors (close-on-exec)
 *  into `fds` and their number into `*count`. A message cut to `cap`, or
 *  with more than `max` descriptors, is -1 with EMSGSIZE, its descriptors
 *  closed. 0 at end of stream. */
long vigil_recv_fds(int sock, void *buf, unsigned long cap, int *fds, int max, int *count);

/** Forks this process, which must have one thread, as a sibling: the
 *  child's parent is our parent (clone(CLONE_PARENT | SIGCHLD), so the host
 *  that asked for it reaps it and has its SIGCHLD). Before returning 0 in
 *  the child: `sources[i]` becomes its descriptor `targets[i]` (not
 *  close-on-exec) and every descriptor above the highest target is closed;
 *  it leads a process group of its own when `new_group`; the value of the
 *  environment variable `name` is overwritten where it lies with `value`,
 *  which must be as long (so /proc/PID/environ shows it too); the
 *  `title_room` bytes at `title` (the process's own argv strings, what
 *  /proc/PID/cmdline shows) hold `command` (NUL-separated words), cut to
 *  fit, and NULs after it; no signal is blocked. In the parent: the child's pid, or -1 with errno (EINVAL: no
 *  such variable or not that long). A child that cannot arrange its
 *  descriptors exits with status 127. */
int vigil_fork_sibling(const int *sources, const int *targets, int count, int new_group,
                       const char *name, const char *value, char *title, unsigned long title_room,
                       const char *command, unsigned long command_length);

/* A plugin in vigil's process that calls exit(): without this, its status
 * became vigil's (exit(3) read as "events were lost"). `vigil_guard_exit`
 * registers an on_exit(3) handler that, unless `vigil_exit_is_ours` was
 * called first (vigil's own way out), says on stderr that something in the
 * process called exit(STATUS) and ends the process with
 * VIGIL_EXIT_FOREIGN instead. */
#define VIGIL_EXIT_FOREIGN 4
void vigil_guard_exit(void);
void vigil_exit_is_ours(void);

#endif
