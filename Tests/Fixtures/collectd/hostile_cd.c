/*
 * A collectd plugin written against collectd-dev's headers alone that does
 * what a careless or hostile one might, for the collectd compat plugin's
 * tests. Built by the tests:
 *
 *   cc -std=gnu11 -shared -fPIC -DHAVE_CONFIG_H -I/usr/include/collectd \
 *      -I/usr/include/collectd/core hostile_cd.c -o hostile_cd.so
 *
 * Config: `Mode abuse` (default) dispatches, every read:
 *   - a value list with more values than its type has sources;
 *   - one of a type types.db does not have;
 *   - one whose names fill their 128 bytes with no NUL;
 *   - a notification with 300 meta entries and an unterminated message;
 *   - a valid gauge "hostile/gauge-ok" = the read's number;
 * and on its third read unregisters its own read callback from inside it
 * and registers another ("second"), which dispatches "hostile/gauge-second".
 * `Mode exit` calls exit(7) on the second read; `Mode crash` dereferences
 * NULL on the second read; `Mode refuse` refuses its config with an error.
 * `Mode failing` dispatches "hostile/gauge-attempt" then fails, every read
 * (collectd's back-off doubles the wait each time); `Mode slow` reads
 * through plugin_register_complex_read with an interval of its own, 1 s.
 */
#include "collectd/core/daemon/collectd.h"
#include "collectd/core/daemon/plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char mode[32] = "abuse";
static int reads;

static int hostile_config(oconfig_item_t *ci) {
    for (int i = 0; i < ci->children_num; i++) {
        oconfig_item_t *child = &ci->children[i];
        if (strcasecmp(child->key, "Mode") == 0 && child->values_num == 1 &&
            child->values[0].type == OCONFIG_TYPE_STRING) {
            snprintf(mode, sizeof mode, "%s", child->values[0].value.string);
        } else {
            ERROR("hostile plugin: unknown option %s", child->key);
            return -1;
        }
    }
    if (strcmp(mode, "refuse") == 0) {
        ERROR("hostile plugin: Mode refuse is refused");
        return -1;
    }
    return 0;
}

static void dispatch_gauge(const char *type_instance, double v) {
    value_list_t vl = VALUE_LIST_INIT;
    value_t value = {.gauge = v};
    vl.values = &value;
    vl.values_len = 1;
    sstrncpy(vl.plugin, "hostile", sizeof vl.plugin);
    sstrncpy(vl.type, "gauge", sizeof vl.type);
    sstrncpy(vl.type_instance, type_instance, sizeof vl.type_instance);
    plugin_dispatch_values(&vl);
}

static int second_read(void) {
    dispatch_gauge("second", reads);
    return 0;
}

static int failing_read(void) {
    dispatch_gauge("attempt", ++reads);
    return -1;
}

static int slow_read(user_data_t *ud) {
    (void)ud;
    dispatch_gauge("slow", ++reads);
    return 0;
}

static int hostile_init(void) {
    if (strcmp(mode, "failing") == 0 || strcmp(mode, "slow") == 0) {
        plugin_unregister_read("hostile");
        if (strcmp(mode, "failing") == 0) plugin_register_read("failing", failing_read);
        else plugin_register_complex_read(NULL, "slow", slow_read, TIME_T_TO_CDTIME_T_STATIC(1), NULL);
    }
    return 0;
}

static int hostile_read(void) {
    reads++;
    if (strcmp(mode, "exit") == 0 && reads == 2) exit(7);
    if (strcmp(mode, "crash") == 0 && reads == 2) {
        volatile int *nothing = NULL;
        return *nothing;
    }

    value_t many[8] = {{.gauge = 1}};
    value_list_t vl = VALUE_LIST_INIT;
    vl.values = many;
    vl.values_len = 8; /* gauge has one source */
    sstrncpy(vl.plugin, "hostile", sizeof vl.plugin);
    sstrncpy(vl.type, "gauge", sizeof vl.type);
    plugin_dispatch_values(&vl);

    vl.values_len = 1;
    sstrncpy(vl.type, "no_such_type", sizeof vl.type);
    plugin_dispatch_values(&vl);

    value_list_t raw = VALUE_LIST_INIT;
    raw.values = many;
    raw.values_len = 1;
    memset(raw.host, 'h', sizeof raw.host);
    memset(raw.plugin, 'p', sizeof raw.plugin);
    memset(raw.plugin_instance, 'i', sizeof raw.plugin_instance);
    sstrncpy(raw.type, "gauge", sizeof raw.type);
    memset(raw.type_instance, 't', sizeof raw.type_instance);
    plugin_dispatch_values(&raw);

    notification_t n = {.severity = NOTIF_WARNING, .time = cdtime()};
    memset(n.message, 'm', sizeof n.message);
    sstrncpy(n.plugin, "hostile", sizeof n.plugin);
    plugin_notification_meta_add_string(&n, "host", "a meta named like a field");
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "k%d", i);
        plugin_notification_meta_add_signed_int(&n, name, i);
    }
    plugin_dispatch_notification(&n);
    plugin_notification_meta_free(n.meta);

    dispatch_gauge("ok", reads);

    if (reads == 3) {
        plugin_unregister_read("hostile");
        plugin_register_read("second", second_read);
    }
    return 0;
}

void module_register(void) {
    plugin_register_complex_config("hostile", hostile_config);
    plugin_register_init("hostile", hostile_init);
    plugin_register_read("hostile", hostile_read);
}
