/* no_entry.c — ABI test fixture: a shared object that exports a function but no vigil_plugin_entry. */
#include "vigil_plugin.h"

/* Close to the real name, to check the host looks up the exact symbol. */
VIGIL_EXPORT int vigil_plugin_entry_v0(void);

VIGIL_EXPORT int vigil_plugin_entry_v0(void) {
    return 42;
}
