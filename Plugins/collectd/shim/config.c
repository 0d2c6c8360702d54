/*
 * Configuration: the manifest's `config:` (JSON text of a YAML map, keys in
 * the order written) as the <Plugin NAME> block collectd would have parsed,
 * each item remembering where in the manifest it came from; oconfig_clone
 * and oconfig_free; and the cf_util_* readers plugins use on items.
 *
 * Mapping: a scalar is `Key value`; a list repeats the key once per
 * element; a map is a <Key ARGS> block whose `$args` (a scalar or a list of
 * scalars) are its arguments and whose other keys are its items. A map with
 * only `$args` is a line with several values (`Server "host" "port"`).
 */
#include "shim.h"
#include "vcd.h"

#include <math.h>
#include <netdb.h>

#define MAX_DEPTH 32
#define MAX_ITEMS 100000
#define MAX_PATH_TEXT 512

/* ----------------------------------------------------------- JSON reading */

typedef enum { J_NULL, J_BOOL, J_NUMBER, J_STRING, J_ARRAY, J_OBJECT } jtype;

typedef struct jvalue {
    jtype type;
    int boolean;
    double number;
    char *string;            /* J_STRING; object keys in `keys` */
    struct jvalue *items;    /* J_ARRAY, J_OBJECT */
    char **keys;             /* J_OBJECT */
    size_t count;
} jvalue;

typedef struct jparser {
    const char *p, *end;
    int depth;
    size_t nodes;
    /* Where the parser is, for its messages: per level the key being read
     * (objects) or the index (lists). */
    const char *keys[MAX_DEPTH + 2];
    long indexes[MAX_DEPTH + 2];
    char error[1024];
} jparser;

static void jfree(jvalue *v) {
    if (v == NULL) return;
    free(v->string);
    for (size_t i = 0; i < v->count; i++) {
        jfree(&v->items[i]);
        if (v->keys != NULL) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
}

static void jskip(jparser *jp) {
    while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r')) jp->p++;
}

static int jfail(jparser *jp, const char *what) {
    if (jp->error[0] != 0) return -1;
    char at[512] = "options.config";
    size_t used = strlen(at);
    for (int level = 1; level <= jp->depth && level < MAX_DEPTH + 2 && used < sizeof at; level++) {
        int n = jp->keys[level] != NULL ? snprintf(at + used, sizeof at - used, ".%s", jp->keys[level])
                : jp->indexes[level] >= 0 ? snprintf(at + used, sizeof at - used, "[%ld]", jp->indexes[level])
                                          : 0;
        if (n < 0) break;
        used += (size_t)n;
    }
    snprintf(jp->error, sizeof jp->error, "%s: %s", at, what);
    return -1;
}

static void put_utf8(char *out, size_t *n, unsigned cp) {
    if (cp < 0x80) {
        out[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*n)++] = (char)(0xC0 | (cp >> 6));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*n)++] = (char)(0xE0 | (cp >> 12));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        out[(*n)++] = (char)(0xF0 | (cp >> 18));
        out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* A JSON string at jp->p (the opening quote) as a NUL-terminated copy. An
 * embedded NUL (\u0000) is refused: collectd's strings cannot hold one. */
static char *jstring(jparser *jp) {
    const char *p = jp->p + 1;
    size_t cap = 0;
    for (const char *q = p; q < jp->end && *q != '"'; q++, cap++)
        if (*q == '\\') q++, cap++;
    char *out = malloc(cap * 2 + 1); /* \uXXXX (6) never yields more than 4 */
    if (out == NULL) return jfail(jp, "out of memory"), NULL;
    size_t n = 0;
    while (p < jp->end && *p != '"') {
        if ((unsigned char)*p < 0x20) return free(out), jfail(jp, "a control character in a string"), NULL;
        if (*p != '\\') {
            out[n++] = *p++;
            continue;
        }
        if (++p >= jp->end) break;
        char e = *p++;
        switch (e) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (p + 4 > jp->end || hex4(p, &cp) != 0) return free(out), jfail(jp, "a bad \\u escape"), NULL;
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p + 6 <= jp->end && p[0] == '\\' && p[1] == 'u') {
                unsigned low;
                if (hex4(p + 2, &low) == 0 && low >= 0xDC00 && low < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    p += 6;
                }
            }
            if (cp == 0) return free(out), jfail(jp, "a string holds a NUL character, which collectd cannot take"), NULL;
            put_utf8(out, &n, cp);
            break;
        }
        default: return free(out), jfail(jp, "a bad escape in a string"), NULL;
        }
    }
    if (p >= jp->end) return free(out), jfail(jp, "a string is not closed"), NULL;
    out[n] = 0;
    jp->p = p + 1;
    return out;
}

static int jparse(jparser *jp, jvalue *v);

static int jparse_container(jparser *jp, jvalue *v, int object) {
    char close = object ? '}' : ']';
    if (jp->depth + 1 > MAX_DEPTH) return jfail(jp, "nested deeper than 32 levels");
    jp->depth++;
    jp->keys[jp->depth] = NULL;
    jp->indexes[jp->depth] = -1;
    jp->p++;
    size_t cap = 0;
    for (;;) {
        jskip(jp);
        if (jp->p < jp->end && *jp->p == close && v->count == 0) break;
        if (v->count == cap) {
            size_t grown = cap ? cap * 2 : 4;
            jvalue *items = realloc(v->items, grown * sizeof *items);
            if (items == NULL) return jfail(jp, "out of memory");
            v->items = items;
            if (object) {
                char **keys = realloc(v->keys, grown * sizeof *keys);
                if (keys == NULL) return jfail(jp, "out of memory");
                v->keys = keys;
            }
            cap = grown;
        }
        jvalue *item = &v->items[v->count];
        memset(item, 0, sizeof *item);
        if (object) {
            v->keys[v->count] = NULL;
            if (jp->p >= jp->end || *jp->p != '"') return jfail(jp, "a key is not a string");
            char *key = jstring(jp);
            if (key == NULL) return -1;
            v->keys[v->count] = key;
            jp->keys[jp->depth] = key;
            jskip(jp);
            if (jp->p >= jp->end || *jp->p != ':') return v->count++, jfail(jp, "':' expected");
            jp->p++;
        }
        if (!object) jp->indexes[jp->depth] = (long)v->count;
        v->count++;
        if (jparse(jp, item) != 0) return -1;
        jskip(jp);
        if (jp->p < jp->end && *jp->p == ',') {
            jp->p++;
            continue;
        }
        if (jp->p < jp->end && *jp->p == close) break;
        return jfail(jp, object ? "',' or '}' expected" : "',' or ']' expected");
    }
    jp->p++;
    jp->keys[jp->depth] = NULL;
    jp->depth--;
    return 0;
}

static int jparse(jparser *jp, jvalue *v) {
    jskip(jp);
    if (++jp->nodes > MAX_ITEMS) return jfail(jp, "more than 100000 values");
    if (jp->p >= jp->end) return jfail(jp, "a value expected");
    char c = *jp->p;
    if (c == '{') return v->type = J_OBJECT, jparse_container(jp, v, 1);
    if (c == '[') return v->type = J_ARRAY, jparse_container(jp, v, 0);
    if (c == '"') {
        v->type = J_STRING;
        v->string = jstring(jp);
        return v->string != NULL ? 0 : -1;
    }
    static const struct { const char *word; jtype type; int boolean; } words[] = {
        {"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i].word);
        if ((size_t)(jp->end - jp->p) >= n && memcmp(jp->p, words[i].word, n) == 0) {
            v->type = words[i].type;
            v->boolean = words[i].boolean;
            jp->p += n;
            return 0;
        }
    }
    char buffer[64];
    size_t n = 0;
    while (jp->p + n < jp->end && n < sizeof buffer - 1 && strchr("+-0123456789.eE", jp->p[n]) != NULL) n++;
    if (n == 0) return jfail(jp, "a value expected");
    memcpy(buffer, jp->p, n);
    buffer[n] = 0;
    char *endp;
    errno = 0;
    v->number = strtod(buffer, &endp);
    if (*endp != 0) return jfail(jp, "a bad number");
    v->type = J_NUMBER;
    jp->p += n;
    return 0;
}

/* ------------------------------------------------------- JSON to oconfig */

/* Where each item came from, parallel to the item tree. */
typedef struct cpath {
    char *text;
    struct cpath *children;
    int count;
} cpath;

struct vcd_config {
    oconfig_item_t root;
    cpath root_path;
};

static void cpath_free(cpath *p) {
    for (int i = 0; i < p->count; i++) cpath_free(&p->children[i]);
    free(p->children);
    free(p->text);
}

static char *path_join(const char *base, const char *key, long index) {
    char buffer[MAX_PATH_TEXT];
    if (index >= 0) snprintf(buffer, sizeof buffer, "%s.%s[%ld]", base, key, index);
    else snprintf(buffer, sizeof buffer, "%s.%s", base, key);
    return sstrdup(buffer);
}

static int to_value(const jvalue *j, oconfig_value_t *out, const char *at, char *err, size_t err_len) {
    switch (j->type) {
    case J_STRING:
        out->type = OCONFIG_TYPE_STRING;
        out->value.string = sstrdup(j->string);
        return out->value.string != NULL ? 0 : -1;
    case J_NUMBER:
        out->type = OCONFIG_TYPE_NUMBER;
        out->value.number = j->number;
        return 0;
    case J_BOOL:
        out->type = OCONFIG_TYPE_BOOLEAN;
        out->value.boolean = j->boolean;
        return 0;
    default:
        snprintf(err, err_len, "%s: a %s where collectd needs a string, a number or a boolean", at,
                 j->type == J_NULL ? "null (or a number without a finite value: .inf, .nan, 1e400)"
                 : j->type == J_ARRAY ? "list" : "map");
        return -1;
    }
}

static int build_items(const jvalue *object, oconfig_item_t *parent, cpath *parent_path, char *err,
                       size_t err_len);

/* One item from `j` under key `key`; `path` is where it is. */
static int build_item(const char *key, const jvalue *j, oconfig_item_t *item, oconfig_item_t *parent,
                      cpath *path, char *err, size_t err_len) {
    item->key = sstrdup(key);
    item->parent = parent;
    if (item->key == NULL) return snprintf(err, err_len, "%s: out of memory", path->text), -1;
    if (j->type != J_OBJECT) {
        item->values = calloc(1, sizeof *item->values);
        if (item->values == NULL) return snprintf(err, err_len, "%s: out of memory", path->text), -1;
        if (to_value(j, &item->values[0], path->text, err, err_len) != 0) return -1;
        item->values_num = 1;
        return 0;
    }
    const jvalue *args = NULL;
    for (size_t i = 0; i < j->count; i++)
        if (strcmp(j->keys[i], "$args") == 0) args = &j->items[i];
    if (args != NULL) {
        size_t n = args->type == J_ARRAY ? args->count : 1;
        item->values = calloc(n ? n : 1, sizeof *item->values);
        if (item->values == NULL) return snprintf(err, err_len, "%s: out of memory", path->text), -1;
        char *at = path_join(path->text, "$args", -1);
        for (size_t i = 0; i < n; i++) {
            const jvalue *a = args->type == J_ARRAY ? &args->items[i] : args;
            char element[MAX_PATH_TEXT];
            if (args->type == J_ARRAY) snprintf(element, sizeof element, "%s[%zu]", at ? at : path->text, i);
            else snprintf(element, sizeof element, "%s", at ? at : path->text);
            if (to_value(a, &item->values[i], element, err, err_len) != 0) return free(at), -1;
            item->values_num = (int)i + 1;
        }
        free(at);
    }
    return build_items(j, item, path, err, err_len);
}

/* The items of a map (its `$args` aside) as the children of `parent`. */
static int build_items(const jvalue *object, oconfig_item_t *parent, cpath *parent_path, char *err,
                       size_t err_len) {
    size_t n = 0;
    for (size_t i = 0; i < object->count; i++) {
        if (strcmp(object->keys[i], "$args") == 0) continue;
        n += object->items[i].type == J_ARRAY ? object->items[i].count : 1;
    }
    if (n == 0) return 0;
    if (n > MAX_ITEMS) return snprintf(err, err_len, "%s: more than 100000 items", parent_path->text), -1;
    parent->children = calloc(n, sizeof *parent->children);
    parent_path->children = calloc(n, sizeof *parent_path->children);
    if (parent->children == NULL || parent_path->children == NULL)
        return snprintf(err, err_len, "%s: out of memory", parent_path->text), -1;
    int k = 0;
    for (size_t i = 0; i < object->count; i++) {
        const char *key = object->keys[i];
        const jvalue *v = &object->items[i];
        if (strcmp(key, "$args") == 0) continue;
        if (key[0] == 0) return snprintf(err, err_len, "%s: an empty key", parent_path->text), -1;
        size_t repeats = v->type == J_ARRAY ? v->count : 1;
        for (size_t r = 0; r < repeats; r++) {
            const jvalue *element = v->type == J_ARRAY ? &v->items[r] : v;
            cpath *path = &parent_path->children[k];
            path->text = path_join(parent_path->text, key, v->type == J_ARRAY ? (long)r : -1);
            parent_path->count = k + 1;
            parent->children_num = k + 1;
            if (path->text == NULL) return snprintf(err, err_len, "%s: out of memory", parent_path->text), -1;
            if (element->type == J_ARRAY)
                return snprintf(err, err_len, "%s: a list inside a list; write a line with several values as a map with $args",
                                path->text), -1;
            if (build_item(key, element, &parent->children[k], parent, path, err, err_len) != 0) return -1;
            k++;
        }
    }
    return 0;
}

static void item_free_contents(oconfig_item_t *ci) {
    free(ci->key);
    for (int i = 0; i < ci->values_num; i++)
        if (ci->values[i].type == OCONFIG_TYPE_STRING) free(ci->values[i].value.string);
    free(ci->values);
    for (int i = 0; i < ci->children_num; i++) item_free_contents(&ci->children[i]);
    free(ci->children);
}

vcd_config *vcd_config_parse(const char *json, size_t len, const char *plugin, char *err, size_t err_len) {
    vcd_config *config = calloc(1, sizeof *config);
    if (config == NULL) return snprintf(err, err_len, "options.config: out of memory"), NULL;
    config->root.key = sstrdup("Plugin");
    config->root.values = calloc(1, sizeof *config->root.values);
    config->root_path.text = sstrdup("options.config");
    if (config->root.key == NULL || config->root.values == NULL || config->root_path.text == NULL) {
        vcd_config_free(config);
        return snprintf(err, err_len, "options.config: out of memory"), NULL;
    }
    config->root.values[0].type = OCONFIG_TYPE_STRING;
    config->root.values[0].value.string = sstrdup(plugin != NULL ? plugin : "");
    config->root.values_num = 1;

    static const char null_text[] = "null";
    if (json == NULL) json = null_text, len = sizeof null_text - 1;
    jparser jp = {.p = json, .end = json + len};
    jvalue top = {0};
    int status = jparse(&jp, &top);
    if (status == 0) {
        jskip(&jp);
        if (jp.p != jp.end) status = jfail(&jp, "text after the value");
    }
    if (status != 0) {
        snprintf(err, err_len, "%s", jp.error);
    } else if (top.type == J_OBJECT) {
        for (size_t i = 0; i < top.count && status == 0; i++)
            if (strcmp(top.keys[i], "$args") == 0) {
                snprintf(err, err_len, "options.config.$args: the plugin's own block takes no arguments");
                status = -1;
            }
        if (status == 0) status = build_items(&top, &config->root, &config->root_path, err, err_len);
    } else if (top.type != J_NULL) {
        snprintf(err, err_len, "options.config: a map of the plugin's options is expected (Key: value)");
        status = -1;
    }
    jfree(&top);
    if (status != 0) {
        vcd_config_free(config);
        return NULL;
    }
    return config;
}

void vcd_config_free(vcd_config *config) {
    if (config == NULL) return;
    item_free_contents(&config->root);
    cpath_free(&config->root_path);
    free(config);
}

VCD_HIDDEN const oconfig_item_t *vcd_config_root(const vcd_config *config) {
    return config != NULL ? &config->root : NULL;
}

/* Where `item` (an item of the parsed tree, not of a clone) came from: its
 * indexes up the parent links, then down the paths; O(depth). */
VCD_HIDDEN const char *vcd_config_path_of(const vcd_config *config, const oconfig_item_t *item) {
    int indexes[MAX_DEPTH + 2];
    int depth = 0;
    for (const oconfig_item_t *at = item; at != &config->root; at = at->parent) {
        const oconfig_item_t *parent = at->parent;
        if (parent == NULL || depth >= MAX_DEPTH + 2 || at < parent->children ||
            at >= parent->children + parent->children_num)
            return "options.config";
        indexes[depth++] = (int)(at - parent->children);
    }
    const cpath *path = &config->root_path;
    while (depth > 0) {
        int i = indexes[--depth];
        if (i >= path->count) return "options.config";
        path = &path->children[i];
    }
    return path->text;
}

static int mentions_word(const char *message, const char *word) {
    size_t n = strlen(word);
    if (n == 0) return 0;
    for (const char *p = message; (p = strcasestr(p, word)) != NULL; p++) {
        int before = p == message || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        int after = !(isalnum((unsigned char)p[n]) || p[n] == '_');
        if (before && after) return 1;
    }
    return 0;
}

static const char *guess(const oconfig_item_t *ci, const cpath *path, const char *message) {
    /* The deepest item whose key (or first string value) the message names. */
    for (int i = 0; i < ci->children_num && i < path->count; i++) {
        const char *deeper = guess(&ci->children[i], &path->children[i], message);
        if (deeper != NULL) return deeper;
    }
    for (int i = 0; i < ci->children_num && i < path->count; i++) {
        const oconfig_item_t *child = &ci->children[i];
        if (mentions_word(message, child->key)) return path->children[i].text;
        if (child->values_num > 0 && child->values[0].type == OCONFIG_TYPE_STRING &&
            strlen(child->values[0].value.string) > 2 && strstr(message, child->values[0].value.string) != NULL)
            return path->children[i].text;
    }
    return NULL;
}

/* The place a complex config callback's refusal is reported at: the item
 * its logged message names, else the whole `config`. */
VCD_HIDDEN const char *vcd_config_guess_path(const vcd_config *config, const char *message) {
    const char *found = message != NULL && message[0] ? guess(&config->root, &config->root_path, message) : NULL;
    return found != NULL ? found : "options.config";
}

/* The item whose key (or string value) a message names, or NULL: a plugin
 * that complains about an item of its configuration while configuring did
 * not take it as written, whatever the level it logged at. */
VCD_HIDDEN const char *vcd_config_item_named(const vcd_config *config, const char *message) {
    return message != NULL && message[0] ? guess(&config->root, &config->root_path, message) : NULL;
}

/* ------------------------------------------------------------- liboconfig */

static int clone_into(oconfig_item_t *dst, const oconfig_item_t *src, oconfig_item_t *parent) {
    memset(dst, 0, sizeof *dst);
    dst->parent = parent;
    dst->key = sstrdup(src->key != NULL ? src->key : "");
    if (dst->key == NULL) return -1;
    if (src->values_num > 0) {
        dst->values = calloc((size_t)src->values_num, sizeof *dst->values);
        if (dst->values == NULL) return -1;
        for (int i = 0; i < src->values_num; i++) {
            dst->values[i] = src->values[i];
            if (src->values[i].type == OCONFIG_TYPE_STRING) {
                dst->values[i].value.string = sstrdup(src->values[i].value.string);
                if (dst->values[i].value.string == NULL) return -1;
            }
            dst->values_num = i + 1;
        }
    }
    if (src->children_num > 0) {
        dst->children = calloc((size_t)src->children_num, sizeof *dst->children);
        if (dst->children == NULL) return -1;
        for (int i = 0; i < src->children_num; i++) {
            dst->children_num = i + 1;
            if (clone_into(&dst->children[i], &src->children[i], dst) != 0) return -1;
        }
    }
    return 0;
}

oconfig_item_t *oconfig_clone(const oconfig_item_t *ci) {
    if (ci == NULL) return NULL;
    oconfig_item_t *copy = calloc(1, sizeof *copy);
    if (copy == NULL) return NULL;
    if (clone_into(copy, ci, ci->parent) != 0) {
        oconfig_free(copy);
        return NULL;
    }
    return copy;
}

void oconfig_free(oconfig_item_t *ci) {
    if (ci == NULL) return;
    item_free_contents(ci);
    free(ci);
}

/* collectd's config file syntax is not read: Vigil configures plugins from
 * its manifest. A plugin that reads a file of its own (postgresql's
 * Writer queries) is told so. */
oconfig_item_t *oconfig_parse_file(const char *file) {
    ERROR("oconfig_parse_file(%s): collectd configuration files are not read under Vigil; configure the plugin "
          "in the manifest",
          file != NULL ? file : "(null)");
    return NULL;
}

/* --------------------------------------------------------------- cf_util */

static int one_value(const oconfig_item_t *ci, int type, const char *what, const char *fn) {
    if (ci == NULL) return -1;
    if (ci->values_num != 1 || ci->values[0].type != type) {
        ERROR("%s: The %s option requires exactly one %s argument.", fn, ci->key, what);
        return -1;
    }
    return 0;
}

int cf_util_get_string(const oconfig_item_t *ci, char **ret_string) {
    if (ret_string == NULL || one_value(ci, OCONFIG_TYPE_STRING, "string", "cf_util_get_string") != 0) return -1;
    char *copy = sstrdup(ci->values[0].value.string);
    if (copy == NULL) return -1;
    free(*ret_string);
    *ret_string = copy;
    return 0;
}

int cf_util_get_string_buffer(const oconfig_item_t *ci, char *buffer, size_t buffer_size) {
    if (buffer == NULL || buffer_size == 0 ||
        one_value(ci, OCONFIG_TYPE_STRING, "string", "cf_util_get_string_buffer") != 0)
        return -1;
    sstrncpy(buffer, ci->values[0].value.string, buffer_size);
    return 0;
}

/* A number that does not fit an int is refused rather than wrapped. */
int cf_util_get_int(const oconfig_item_t *ci, int *ret_value) {
    if (ret_value == NULL || one_value(ci, OCONFIG_TYPE_NUMBER, "numeric", "cf_util_get_int") != 0) return -1;
    double d = ci->values[0].value.number;
    if (!(d >= (double)INT_MIN && d <= (double)INT_MAX)) {
        ERROR("cf_util_get_int: The %s option's value %g does not fit an int.", ci->key, d);
        return -1;
    }
    *ret_value = (int)d;
    return 0;
}

int cf_util_get_double(const oconfig_item_t *ci, double *ret_value) {
    if (ret_value == NULL || one_value(ci, OCONFIG_TYPE_NUMBER, "numeric", "cf_util_get_double") != 0) return -1;
    *ret_value = ci->values[0].value.number;
    return 0;
}

int cf_util_get_boolean(const oconfig_item_t *ci, bool *ret_bool) {
    if (ci == NULL || ret_bool == NULL) return -1;
    if (ci->values_num != 1 ||
        (ci->values[0].type != OCONFIG_TYPE_BOOLEAN && ci->values[0].type != OCONFIG_TYPE_STRING)) {
        ERROR("cf_util_get_boolean: The %s option requires exactly one boolean argument.", ci->key);
        return -1;
    }
    if (ci->values[0].type == OCONFIG_TYPE_BOOLEAN) {
        *ret_bool = ci->values[0].value.boolean != 0;
        return 0;
    }
    /* collectd also takes these words for a boolean. */
    const char *s = ci->values[0].value.string;
    if (strcasecmp(s, "true") == 0 || strcasecmp(s, "yes") == 0 || strcasecmp(s, "on") == 0) {
        *ret_bool = true;
    } else if (strcasecmp(s, "false") == 0 || strcasecmp(s, "no") == 0 || strcasecmp(s, "off") == 0) {
        *ret_bool = false;
    } else {
        ERROR("cf_util_get_boolean: Cannot parse string value `%s' of the `%s' option as a boolean value.", s,
              ci->key);
        return -1;
    }
    return 0;
}

int cf_util_get_flag(const oconfig_item_t *ci, unsigned int *ret_value, unsigned int flag) {
    bool b = false;
    if (ret_value == NULL || cf_util_get_boolean(ci, &b) != 0) return -1;
    if (b) *ret_value |= flag;
    else *ret_value &= ~flag;
    return 0;
}

static int service_port(const char *service) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *list = NULL;
    if (getaddrinfo(NULL, service, &hints, &list) != 0 || list == NULL) return -1;
    int port = -1;
    if (list->ai_family == AF_INET) port = ntohs(((struct sockaddr_in *)list->ai_addr)->sin_port);
    else if (list->ai_family == AF_INET6) port = ntohs(((struct sockaddr_in6 *)list->ai_addr)->sin6_port);
    freeaddrinfo(list);
    return port > 0 && port <= 65535 ? port : -1;
}

int cf_util_get_port_number(const oconfig_item_t *ci) {
    if (ci == NULL) return -1;
    if (ci->values_num != 1 ||
        (ci->values[0].type != OCONFIG_TYPE_STRING && ci->values[0].type != OCONFIG_TYPE_NUMBER)) {
        ERROR("cf_util_get_port_number: The \"%s\" option requires exactly one string or numeric argument.",
              ci->key);
        return -1;
    }
    if (ci->values[0].type == OCONFIG_TYPE_STRING) {
        int port = service_port(ci->values[0].value.string);
        if (port < 0) ERROR("cf_util_get_port_number: \"%s\" is not a port or a service.", ci->values[0].value.string);
        return port;
    }
    double d = ci->values[0].value.number;
    if (!(d >= 1 && d <= 65535) || d != floor(d)) {
        ERROR("cf_util_get_port_number: The \"%s\" option requires a port number from 1 to 65535, not %g.", ci->key,
              d);
        return -1;
    }
    return (int)d;
}

int cf_util_get_service(const oconfig_item_t *ci, char **ret_string) {
    if (ci == NULL || ret_string == NULL) return -1;
    if (ci->values_num != 1 ||
        (ci->values[0].type != OCONFIG_TYPE_STRING && ci->values[0].type != OCONFIG_TYPE_NUMBER)) {
        ERROR("cf_util_get_service: The %s option requires exactly one string or numeric argument.", ci->key);
        return -1;
    }
    if (ci->values[0].type == OCONFIG_TYPE_STRING) return cf_util_get_string(ci, ret_string);
    double d = ci->values[0].value.number;
    if (!(d >= 1 && d <= 65535) || d != floor(d)) {
        ERROR("cf_util_get_service: The port number %g of the %s option is out of range.", d, ci->key);
        return -1;
    }
    char buffer[8];
    snprintf(buffer, sizeof buffer, "%d", (int)d);
    char *copy = sstrdup(buffer);
    if (copy == NULL) return -1;
    free(*ret_string);
    *ret_string = copy;
    return 0;
}

/* Seconds, at least 0 and at most a year (a longer interval is a typo). */
int cf_util_get_cdtime(const oconfig_item_t *ci, cdtime_t *ret_value) {
    if (ret_value == NULL || one_value(ci, OCONFIG_TYPE_NUMBER, "numeric", "cf_util_get_cdtime") != 0) return -1;
    double d = ci->values[0].value.number;
    if (!(d >= 0 && d <= 366.0 * 86400)) {
        ERROR("cf_util_get_cdtime: The %s option requires a time from 0 to a year in seconds, not %g.", ci->key, d);
        return -1;
    }
    *ret_value = DOUBLE_TO_CDTIME_T(d);
    return 0;
}

cdtime_t cf_get_default_interval(void) { return interval_g; }

/* Global options collectd's config file would set; plugins ask for a few
 * (Hostname, Interval, Timeout). */
const char *global_option_get(const char *option) {
    if (option == NULL) return NULL;
    if (strcasecmp(option, "Hostname") == 0) return hostname_g;
    return NULL;
}

long global_option_get_long(const char *option, long default_value) {
    if (option != NULL && strcasecmp(option, "Timeout") == 0) return timeout_g;
    return default_value;
}

cdtime_t global_option_get_time(char const *option, cdtime_t default_value) {
    if (option != NULL && strcasecmp(option, "Interval") == 0) return interval_g;
    return default_value;
}
