#include "linux_probes.h"

#include <sys/vfs.h>

long linux_probes_filesystem_type(int fd) {
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0) return -1;
    return (long)fs.f_type;
}
