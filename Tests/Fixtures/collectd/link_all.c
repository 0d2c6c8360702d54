/*
 * Loads the collectd shim RTLD_GLOBAL, then every collectd plugin in a
 * directory RTLD_NOW | RTLD_LOCAL, as the collectd plugin does, and counts
 * how each went: loaded (every daemon symbol it imports was found), a
 * library of its own missing (not installed here), or anything else (an
 * undefined symbol: a hole in the shim). Exits 1 on anything else.
 *
 *   cc link_all.c -ldl -o link_all && ./link_all SHIM.so /usr/lib/collectd
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s SHIM.so PLUGIN_DIR\n", argv[0]);
        return 2;
    }
    if (dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL) == NULL) {
        printf("shim: %s\n", dlerror());
        return 2;
    }
    struct dirent **entries;
    int n = scandir(argv[2], &entries, NULL, alphasort);
    if (n < 0) {
        perror(argv[2]);
        return 2;
    }
    int loaded = 0, missing = 0, bad = 0;
    for (int i = 0; i < n; i++) {
        const char *file = entries[i]->d_name;
        size_t len = strlen(file);
        if (len > 3 && strcmp(file + len - 3, ".so") == 0) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[2], file);
            void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (handle != NULL && dlsym(handle, "module_register") != NULL) {
                loaded++;
            } else if (handle != NULL) {
                printf("no module_register: %s\n", file);
                bad++;
            } else {
                const char *why = dlerror();
                if (strstr(why, "cannot open shared object file") != NULL) {
                    missing++;
                } else {
                    printf("failed: %s\n", why);
                    bad++;
                }
            }
        }
        free(entries[i]);
    }
    free(entries);
    printf("loaded %d, a library missing %d, failed %d\n", loaded, missing, bad);
    return bad != 0;
}
