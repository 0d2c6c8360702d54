/*
 * jsonlines.c — the one-core reference of scripts/bench's flood -> file
 * figures: a C program that makes the events the `flood` plugin makes
 * (fields v0..vN-1 = n + i * 0.5) and writes each as the JSON line Vigil's
 * file sink writes (time to the nanosecond, host, monitor, plugin, kind,
 * severity, seq, fields), into a file through a 1 MiB buffer, on one thread.
 * Doubles are written with "%.17g" (round-trippable, as yajl writes them);
 * the time's date part is formatted once a second, as Vigil does.
 *
 *     jsonlines COUNT FIELDS PATH
 *
 * prints "lines N FIRST_NS LAST_NS CPU_NS" (CLOCK_MONOTONIC at the start and
 * after the last write; the process's CPU time) and exits.
 *
 *   cc -std=c99 -O2 -Wall -Wextra -o jsonlines scripts/jsonlines.c
 */
#define _POSIX_C_SOURCE 200809L

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int64_t ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void flush(int fd, char *buf, size_t *len) {
    size_t off = 0;
    while (off < *len) {
        ssize_t n = write(fd, buf + off, *len - off);
        if (n <= 0) {
            perror("write");
            exit(1);
        }
        off += (size_t)n;
    }
    *len = 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: jsonlines COUNT FIELDS PATH\n");
        return 2;
    }
    long long count = atoll(argv[1]);
    int fields = atoi(argv[2]);
    if (fields < 1 || fields > 16) fields = 1;
    int fd = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0640);
    if (fd < 0) {
        perror(argv[3]);
        return 1;
    }
    enum { CAP = 1 << 20 };
    char *buf = malloc(CAP);
    size_t len = 0;
    char date[32] = "";
    time_t cached = (time_t)-1;
    int64_t first = ns(CLOCK_MONOTONIC);
    for (long long n = 0; n < count; n++) {
        if (len > CAP - 1024) flush(fd, buf, &len);
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        if (now.tv_sec != cached) {
            struct tm tm;
            gmtime_r(&now.tv_sec, &tm);
            strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
            cached = now.tv_sec;
        }
        len += (size_t)snprintf(buf + len, CAP - len,
                                "{\"time\":\"%s.%09ldZ\",\"host\":\"vm\",\"monitor\":\"flood\",\"plugin\":\"flood\","
                                "\"kind\":\"flood\",\"severity\":\"info\",\"seq\":%lld,\"fields\":{",
                                date, now.tv_nsec, n + 2);
        for (int i = 0; i < fields; i++)
            len += (size_t)snprintf(buf + len, CAP - len, "%s\"v%d\":%.17g", i ? "," : "", i, (double)n + i * 0.5);
        memcpy(buf + len, "}}\n", 3);
        len += 3;
    }
    flush(fd, buf, &len);
    int64_t last = ns(CLOCK_MONOTONIC);
    close(fd);
    printf("lines %lld %lld %lld %lld\n", count, (long long)first, (long long)last,
           (long long)ns(CLOCK_PROCESS_CPUTIME_ID));
    return 0;
}
