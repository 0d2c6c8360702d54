/* output_bad_descriptor.c — ABI test fixture: an output whose descriptor is
 * wrong in the way the environment variable VIGIL_BAD_OUTPUT names:
 *   write_null   kind OUTPUT without `write`;
 *   kind_3       kind 3 (no such kind); kind_max: 0x7FFFFFFF; kind_0: 0;
 *   events       an output that declares an event kind;
 *   poll         an output with `poll`;
 *   old_minor    an output that chose ABI 1.4 (before outputs);
 *   short        an output whose descriptor's size stops before `write`;
 *   huge_default an option whose default is 1 MiB of text (and a 1 MiB doc);
 *   bad_default  an INT option whose default is "lots";
 * and a sound output (OK for every event) otherwise. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "vigil_plugin.h"

static vigil_status create(const vigil_create_args *args, void **instance, vigil_error *err) {
    (void)args;
    (void)err;
    *instance = malloc(1);
    return VIGIL_OK;
}

static void destroy(void *instance) { free(instance); }

static vigil_status poll_(void *instance, vigil_error *err) {
    (void)instance;
    (void)err;
    return VIGIL_OK;
}

static vigil_status write_batch(void *instance, const vigil_batch *batch, vigil_write_result *result, vigil_error *err) {
    (void)instance;
    (void)batch;
    (void)result;
    (void)err;
    return VIGIL_OK;
}

static const vigil_field_spec fields[] = {
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_INT, .name = VIGIL_STR("n") },
};
static const vigil_event_spec events[] = {
    { .size = sizeof(vigil_event_spec), .kind = VIGIL_STR("sample"), .fields = fields, .field_count = 1 },
};

static char big[1 << 20];
static vigil_option_spec options[1];
static vigil_plugin_descriptor descriptor;

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    const char *bad = getenv("VIGIL_BAD_OUTPUT");
    if (bad == NULL) bad = "";
    memset(&descriptor, 0, sizeof descriptor);
    descriptor.size = sizeof descriptor;
    descriptor.kind = VIGIL_PLUGIN_OUTPUT;
    descriptor.name = (vigil_str)VIGIL_STR("output_bad_descriptor");
    descriptor.version = (vigil_str)VIGIL_STR("1.0.0");
    descriptor.description = (vigil_str)VIGIL_STR("ABI test fixture: an output with a wrong descriptor.");
    descriptor.create = create;
    descriptor.destroy = destroy;
    descriptor.write = write_batch;
    if (strcmp(bad, "write_null") == 0) descriptor.write = NULL;
    if (strcmp(bad, "kind_3") == 0) descriptor.kind = 3;
    if (strcmp(bad, "kind_max") == 0) descriptor.kind = 0x7FFFFFFF;
    if (strcmp(bad, "kind_0") == 0) descriptor.kind = 0;
    if (strcmp(bad, "events") == 0) { descriptor.events = events; descriptor.event_count = 1; }
    if (strcmp(bad, "poll") == 0) descriptor.poll = poll_;
    if (strcmp(bad, "short") == 0) descriptor.size = (uint32_t)VIGIL_DESCRIPTOR_SIZE_1_0;
    if (strcmp(bad, "huge_default") == 0 || strcmp(bad, "bad_default") == 0) {
        memset(big, 'x', sizeof big);
        options[0].size = sizeof(vigil_option_spec);
        options[0].type = strcmp(bad, "bad_default") == 0 ? VIGIL_TYPE_INT : VIGIL_TYPE_STRING;
        options[0].name = (vigil_str)VIGIL_STR("target");
        options[0].default_text = strcmp(bad, "bad_default") == 0 ? (vigil_str)VIGIL_STR("lots") : (vigil_str){ big, sizeof big };
        options[0].doc = strcmp(bad, "bad_default") == 0 ? (vigil_str)VIGIL_STR("A target.") : (vigil_str){ big, sizeof big };
        descriptor.options = options;
        descriptor.option_count = 1;
    }
    vigil_status status = vigil_negotiate(args, result, &descriptor);
    if (status == VIGIL_OK && strcmp(bad, "old_minor") == 0) result->abi_minor = 4;
    return status;
}
