/*
 * linecount.c — the TCP peer of scripts/bench's `output` group: listens on
 * 127.0.0.1 (an ephemeral port, printed as "port N" on stdout), takes any
 * number of connections, and counts the bytes and newlines they send. When
 * its stdin closes it prints
 *
 *     lines BYTES_TOTAL FIRST_NS LAST_NS CPU_NS CONNECTIONS
 *
 * (lines counted; the CLOCK_MONOTONIC times of the first and the last data;
 * its own CPU time) and exits, once every connection has closed too. It reads 1 MiB at a time and counts with
 * memchr, so that it costs far less than any sender it measures; CPU_NS
 * says how much it did cost.
 *
 *   cc -std=c99 -O2 -Wall -Wextra -o linecount scripts/linecount.c
 */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNECTIONS 64
#define BUFFER_BYTES (1 << 20)

static int64_t now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int main(void) {
    struct sockaddr_in address;
    socklen_t length = sizeof address;
    struct pollfd fds[2 + MAX_CONNECTIONS];
    size_t open_count = 0, connections = 0, i;
    uint64_t lines = 0, bytes = 0;
    int64_t first = 0, last = 0;
    char *buffer = malloc(BUFFER_BYTES);
    int one = 1, listener = socket(AF_INET, SOCK_STREAM, 0);
    if (buffer == NULL || listener < 0) return perror("linecount"), 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&address, 0, sizeof address);
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 16) != 0 ||
        getsockname(listener, (struct sockaddr *)&address, &length) != 0)
        return perror("linecount: listen"), 1;
    printf("port %d\n", ntohs(address.sin_port));
    fflush(stdout);

    fds[0].fd = STDIN_FILENO;
    fds[0].events = POLLIN;
    fds[1].fd = listener;
    fds[1].events = POLLIN;
    for (;;) {
        if (poll(fds, 2 + open_count, -1) < 0) {
            if (errno == EINTR) continue;
            return perror("linecount: poll"), 1;
        }
        /* Connections first: whatever they hold is read before stdin's EOF ends the count. */
        for (i = 0; i < open_count; i++) {
            struct pollfd *p = &fds[2 + i];
            ssize_t n;
            if (p->revents == 0) continue;
            n = read(p->fd, buffer, BUFFER_BYTES);
            if (n > 0) {
                const char *at = buffer, *end = buffer + n;
                int64_t t = now_ns(CLOCK_MONOTONIC);
                if (first == 0) first = t;
                last = t;
                bytes += (uint64_t)n;
                while ((at = memchr(at, '\n', (size_t)(end - at))) != NULL) {
                    lines++;
                    at++;
                }
            } else if (n == 0 || errno != EINTR) {
                close(p->fd);
                fds[2 + i] = fds[2 + open_count - 1];
                open_count--;
                i--;
            }
        }
        if (fds[1].revents & POLLIN) {
            int fd = accept(listener, NULL, NULL);
            if (fd >= 0 && open_count < MAX_CONNECTIONS) {
                fds[2 + open_count].fd = fd;
                fds[2 + open_count].events = POLLIN;
                fds[2 + open_count].revents = 0;
                open_count++;
                connections++;
            } else if (fd >= 0) {
                close(fd);
            }
        }
        if (fds[0].revents != 0 && read(STDIN_FILENO, buffer, BUFFER_BYTES) <= 0)
            fds[0].fd = -1; /* the end: once the connections have closed (the sender has exited) */
        if (fds[0].fd < 0 && open_count == 0) {
            printf("%llu %llu %lld %lld %lld %zu\n", (unsigned long long)lines, (unsigned long long)bytes,
                   (long long)first, (long long)last, (long long)now_ns(CLOCK_PROCESS_CPUTIME_ID), connections);
            return 0;
        }
    }
}
