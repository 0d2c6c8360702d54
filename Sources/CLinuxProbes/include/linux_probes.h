#ifndef LINUX_PROBES_H
#define LINUX_PROBES_H

/* The f_type of the filesystem `fd` is on (fstatfs(2)): PROC_SUPER_MAGIC,
 * SYSFS_MAGIC…; -1 with errno set when it cannot be had. Swift's Glibc
 * module does not bring in <sys/vfs.h>. */
long linux_probes_filesystem_type(int fd);

#endif
