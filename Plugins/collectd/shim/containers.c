/*
 * containers.c: collectd's container types, written for Vigil from the
 * declarations in collectd-dev's headers: the AVL tree (avltree.h), the
 * singly linked list (utils_llist.h) and meta data (meta_data.h).
 *
 * Like collectd's, the tree and the list are not locked (callers lock);
 * meta data carries its own mutex.
 */
#include "shim.h"

#include <pthread.h>

/* Plugins bind to these by name, whatever -fvisibility the build uses. */
#pragma GCC visibility push(default)

/* ============================================================ AVL tree */

typedef struct vcd_avl_node {
  void *key;
  void *value;
  struct vcd_avl_node *left;
  struct vcd_avl_node *right;
  int height;
} vcd_avl_node;

struct c_avl_tree_s {
  vcd_avl_node *root;
  int (*compare)(const void *, const void *);
  int size;
};

/* The iterator remembers its current node; the next or previous one is
 * found from the root by key, so no parent links are needed. */
struct c_avl_iterator_s {
  c_avl_tree_t *tree;
  vcd_avl_node *node;
};

static int avl_height(const vcd_avl_node *n) {
  return n != NULL ? n->height : 0;
}

static void avl_update(vcd_avl_node *n) {
  int hl = avl_height(n->left);
  int hr = avl_height(n->right);
  n->height = (hl > hr ? hl : hr) + 1;
}

static vcd_avl_node *avl_rotate_right(vcd_avl_node *n) {
  vcd_avl_node *l = n->left;
  n->left = l->right;
  l->right = n;
  avl_update(n);
  avl_update(l);
  return l;
}

static vcd_avl_node *avl_rotate_left(vcd_avl_node *n) {
  vcd_avl_node *r = n->right;
  n->right = r->left;
  r->left = n;
  avl_update(n);
  avl_update(r);
  return r;
}

/* Restores the AVL balance at `n` after one of its subtrees changed. */
static vcd_avl_node *avl_balance(vcd_avl_node *n) {
  avl_update(n);
  int bf = avl_height(n->left) - avl_height(n->right);
  if (bf > 1) {
    if (avl_height(n->left->left) < avl_height(n->left->right))
      n->left = avl_rotate_left(n->left);
    return avl_rotate_right(n);
  }
  if (bf < -1) {
    if (avl_height(n->right->right) < avl_height(n->right->left))
      n->right = avl_rotate_right(n->right);
    return avl_rotate_left(n);
  }
  return n;
}

c_avl_tree_t *c_avl_create(int (*compare)(const void *, const void *)) {
  if (compare == NULL)
    return NULL;
  c_avl_tree_t *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return NULL;
  t->compare = compare;
  return t;
}

static void avl_free_nodes(vcd_avl_node *n) {
  while (n != NULL) {
    avl_free_nodes(n->left);
    vcd_avl_node *right = n->right;
    free(n);
    n = right;
  }
}

void c_avl_destroy(c_avl_tree_t *t) {
  if (t == NULL)
    return;
  avl_free_nodes(t->root);
  free(t);
}

/* Inserts below `n`; *status is 0 (inserted), 1 (key exists) or -1. */
static vcd_avl_node *avl_insert(c_avl_tree_t *t, vcd_avl_node *n, void *key, void *value,
                                int *status) {
  if (n == NULL) {
    vcd_avl_node *node = calloc(1, sizeof(*node));
    if (node == NULL) {
      *status = -1;
      return NULL;
    }
    node->key = key;
    node->value = value;
    node->height = 1;
    *status = 0;
    return node;
  }
  int cmp = t->compare(key, n->key);
  if (cmp == 0) {
    *status = 1;
    return n;
  }
  if (cmp < 0)
    n->left = avl_insert(t, n->left, key, value, status);
  else
    n->right = avl_insert(t, n->right, key, value, status);
  return (*status == 0) ? avl_balance(n) : n;
}

int c_avl_insert(c_avl_tree_t *t, void *key, void *value) {
  if (t == NULL)
    return -1;
  if (t->size == INT_MAX)
    return -1;
  int status = -1;
  vcd_avl_node *root = avl_insert(t, t->root, key, value, &status);
  if (status == 0) {
    t->root = root;
    t->size++;
  }
  return status;
}

/* Unlinks the smallest node below `n` into *min and rebalances. */
static vcd_avl_node *avl_detach_min(vcd_avl_node *n, vcd_avl_node **min) {
  if (n->left == NULL) {
    *min = n;
    return n->right;
  }
  n->left = avl_detach_min(n->left, min);
  return avl_balance(n);
}

/* Removes the node matching `key` below `n` into *found (NULL if none). */
static vcd_avl_node *avl_remove(c_avl_tree_t *t, vcd_avl_node *n, const void *key,
                                vcd_avl_node **found) {
  if (n == NULL)
    return NULL;
  int cmp = t->compare(key, n->key);
  if (cmp < 0) {
    n->left = avl_remove(t, n->left, key, found);
  } else if (cmp > 0) {
    n->right = avl_remove(t, n->right, key, found);
  } else {
    *found = n;
    if (n->left == NULL || n->right == NULL)
      return n->left != NULL ? n->left : n->right;
    /* Two children: the in-order successor takes this node's place. */
    vcd_avl_node *succ = NULL;
    vcd_avl_node *right = avl_detach_min(n->right, &succ);
    succ->left = n->left;
    succ->right = right;
    return avl_balance(succ);
  }
  return (*found != NULL) ? avl_balance(n) : n;
}

int c_avl_remove(c_avl_tree_t *t, const void *key, void **rkey, void **rvalue) {
  if (t == NULL)
    return -1;
  vcd_avl_node *found = NULL;
  t->root = avl_remove(t, t->root, key, &found);
  if (found == NULL)
    return -1;
  if (rkey != NULL)
    *rkey = found->key;
  if (rvalue != NULL)
    *rvalue = found->value;
  free(found);
  t->size--;
  return 0;
}

static vcd_avl_node *avl_find(c_avl_tree_t *t, const void *key) {
  vcd_avl_node *n = t->root;
  while (n != NULL) {
    int cmp = t->compare(key, n->key);
    if (cmp == 0)
      return n;
    n = (cmp < 0) ? n->left : n->right;
  }
  return NULL;
}

int c_avl_get(c_avl_tree_t *t, const void *key, void **value) {
  if (t == NULL)
    return -1;
  vcd_avl_node *n = avl_find(t, key);
  if (n == NULL)
    return -1;
  if (value != NULL)
    *value = n->value;
  return 0;
}

int c_avl_pick(c_avl_tree_t *t, void **key, void **value) {
  if (t == NULL || t->root == NULL || key == NULL || value == NULL)
    return -1;
  /* Takes the root: any element will do, and this one costs O(log n). */
  void *k = t->root->key;
  return c_avl_remove(t, k, key, value);
}

c_avl_iterator_t *c_avl_get_iterator(c_avl_tree_t *t) {
  if (t == NULL)
    return NULL;
  c_avl_iterator_t *iter = calloc(1, sizeof(*iter));
  if (iter == NULL)
    return NULL;
  iter->tree = t;
  return iter;
}

/* The node after (dir > 0) or before (dir < 0) `cur`; from a fresh
 * iterator (cur NULL) the first or last node. */
static vcd_avl_node *avl_step(c_avl_tree_t *t, const vcd_avl_node *cur, int dir) {
  vcd_avl_node *best = NULL;
  vcd_avl_node *n = t->root;
  while (n != NULL) {
    int cmp = (cur == NULL) ? -dir : t->compare(cur->key, n->key);
    if ((dir > 0 && cmp < 0) || (dir < 0 && cmp > 0)) {
      best = n;
      n = (dir > 0) ? n->left : n->right;
    } else {
      n = (dir > 0) ? n->right : n->left;
    }
  }
  return best;
}

static int avl_iterator_move(c_avl_iterator_t *iter, void **key, void **value, int dir) {
  if (iter == NULL || iter->tree == NULL)
    return -1;
  vcd_avl_node *n = avl_step(iter->tree, iter->node, dir);
  /* At either end the iterator stays where it was, as in collectd. */
  if (n == NULL)
    return -1;
  iter->node = n;
  if (key != NULL)
    *key = n->key;
  if (value != NULL)
    *value = n->value;
  return 0;
}

int c_avl_iterator_next(c_avl_iterator_t *iter, void **key, void **value) {
  return avl_iterator_move(iter, key, value, 1);
}

int c_avl_iterator_prev(c_avl_iterator_t *iter, void **key, void **value) {
  return avl_iterator_move(iter, key, value, -1);
}

void c_avl_iterator_destroy(c_avl_iterator_t *iter) {
  free(iter);
}

int c_avl_size(c_avl_tree_t *t) {
  return (t != NULL) ? t->size : 0;
}

/* ======================================================== linked list */

struct llist_s {
  llentry_t *head;
  llentry_t *tail;
  int size;
};

llist_t *llist_create(void) {
  return calloc(1, sizeof(llist_t));
}

void llist_destroy(llist_t *l) {
  if (l == NULL)
    return;
  llentry_t *e = l->head;
  while (e != NULL) {
    llentry_t *next = e->next;
    llentry_destroy(e);
    e = next;
  }
  free(l);
}

/* The key is stored as given, not copied, as in collectd. */
llentry_t *llentry_create(char *key, void *value) {
  llentry_t *e = malloc(sizeof(*e));
  if (e == NULL)
    return NULL;
  e->key = key;
  e->value = value;
  e->next = NULL;
  return e;
}

void llentry_destroy(llentry_t *e) {
  free(e);
}

void llist_append(llist_t *l, llentry_t *e) {
  if (l == NULL || e == NULL)
    return;
  e->next = NULL;
  if (l->tail == NULL)
    l->head = e;
  else
    l->tail->next = e;
  l->tail = e;
  l->size++;
}

void llist_prepend(llist_t *l, llentry_t *e) {
  if (l == NULL || e == NULL)
    return;
  e->next = l->head;
  l->head = e;
  if (l->tail == NULL)
    l->tail = e;
  l->size++;
}

void llist_remove(llist_t *l, llentry_t *e) {
  if (l == NULL || e == NULL)
    return;
  llentry_t *prev = NULL;
  llentry_t *cur = l->head;
  while (cur != NULL && cur != e) {
    prev = cur;
    cur = cur->next;
  }
  /* An entry not in the list leaves it untouched. */
  if (cur == NULL)
    return;
  if (prev == NULL)
    l->head = e->next;
  else
    prev->next = e->next;
  if (l->tail == e)
    l->tail = prev;
  e->next = NULL;
  l->size--;
}

int llist_size(llist_t *l) {
  return (l != NULL) ? l->size : 0;
}

static int llist_key_compare(llentry_t *e, void *key) {
  if (e == NULL || e->key == NULL || key == NULL)
    return -1;
  return strcmp(e->key, (const char *)key);
}

llentry_t *llist_search(llist_t *l, const char *key) {
  return llist_search_custom(l, llist_key_compare, (void *)(uintptr_t)key);
}

llentry_t *llist_search_custom(llist_t *l, int (*compare)(llentry_t *, void *), void *user_data) {
  if (l == NULL || compare == NULL)
    return NULL;
  for (llentry_t *e = l->head; e != NULL; e = e->next)
    if (compare(e, user_data) == 0)
      return e;
  return NULL;
}

llentry_t *llist_head(llist_t *l) {
  return (l != NULL) ? l->head : NULL;
}

llentry_t *llist_tail(llist_t *l) {
  return (l != NULL) ? l->tail : NULL;
}

/* ========================================================== meta data */

typedef struct vcd_md_entry {
  char *key;
  int type;
  union {
    char *mv_string;
    int64_t mv_signed_int;
    uint64_t mv_unsigned_int;
    double mv_double;
    bool mv_boolean;
  } value;
  struct vcd_md_entry *next;
} vcd_md_entry;

/* Entries in insertion order; keys compare case-insensitively, as in
 * collectd. */
struct meta_data_s {
  vcd_md_entry *head;
  pthread_mutex_t lock;
};

static void md_entry_free(vcd_md_entry *e) {
  if (e == NULL)
    return;
  free(e->key);
  if (e->type == MD_TYPE_STRING)
    free(e->value.mv_string);
  free(e);
}

static void md_entries_free(vcd_md_entry *e) {
  while (e != NULL) {
    vcd_md_entry *next = e->next;
    md_entry_free(e);
    e = next;
  }
}

/* A new entry for `key` of `type`; a string value is copied. */
static vcd_md_entry *md_entry_new(const char *key, int type, const char *string) {
  vcd_md_entry *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return NULL;
  e->key = strdup(key);
  e->type = type;
  if (type == MD_TYPE_STRING)
    e->value.mv_string = strdup(string);
  if (e->key == NULL || (type == MD_TYPE_STRING && e->value.mv_string == NULL)) {
    md_entry_free(e);
    return NULL;
  }
  return e;
}

/* A new entry for `key` with the type and value of `orig`; a string is
 * copied. */
static vcd_md_entry *md_entry_clone(const char *key, const vcd_md_entry *orig) {
  vcd_md_entry *e =
      md_entry_new(key, orig->type, orig->type == MD_TYPE_STRING ? orig->value.mv_string : NULL);
  if (e != NULL && orig->type != MD_TYPE_STRING)
    e->value = orig->value;
  return e;
}

/* Puts `e` in place of the entry with the same key, or at the end.
 * The caller holds md->lock. */
static void md_insert_locked(meta_data_t *md, vcd_md_entry *e) {
  vcd_md_entry **link = &md->head;
  while (*link != NULL && strcasecmp((*link)->key, e->key) != 0)
    link = &(*link)->next;
  vcd_md_entry *old = *link;
  e->next = (old != NULL) ? old->next : NULL;
  *link = e;
  md_entry_free(old);
}

static int md_insert(meta_data_t *md, vcd_md_entry *e) {
  if (e == NULL)
    return -ENOMEM;
  pthread_mutex_lock(&md->lock);
  md_insert_locked(md, e);
  pthread_mutex_unlock(&md->lock);
  return 0;
}

/* The entry for `key`, or NULL. The caller holds md->lock. */
static vcd_md_entry *md_lookup_locked(meta_data_t *md, const char *key) {
  for (vcd_md_entry *e = md->head; e != NULL; e = e->next)
    if (strcasecmp(key, e->key) == 0)
      return e;
  return NULL;
}

/* Copies of all entries of `md`, in order; false when out of memory. */
static bool md_clone_entries(meta_data_t *md, vcd_md_entry **out) {
  *out = NULL;
  vcd_md_entry **tail = out;
  bool ok = true;
  pthread_mutex_lock(&md->lock);
  for (const vcd_md_entry *e = md->head; e != NULL && ok; e = e->next) {
    *tail = md_entry_clone(e->key, e);
    ok = (*tail != NULL);
    if (ok)
      tail = &(*tail)->next;
  }
  pthread_mutex_unlock(&md->lock);
  if (!ok) {
    md_entries_free(*out);
    *out = NULL;
  }
  return ok;
}

meta_data_t *meta_data_create(void) {
  meta_data_t *md = calloc(1, sizeof(*md));
  if (md == NULL) {
    ERROR("meta_data_create: calloc failed.");
    return NULL;
  }
  if (pthread_mutex_init(&md->lock, NULL) != 0) {
    free(md);
    return NULL;
  }
  return md;
}

meta_data_t *meta_data_clone(meta_data_t *orig) {
  if (orig == NULL)
    return NULL;
  vcd_md_entry *entries = NULL;
  if (!md_clone_entries(orig, &entries))
    return NULL;
  meta_data_t *copy = meta_data_create();
  if (copy == NULL) {
    md_entries_free(entries);
    return NULL;
  }
  copy->head = entries;
  return copy;
}

int meta_data_clone_merge(meta_data_t **dest, meta_data_t *orig) {
  if (dest == NULL)
    return -EINVAL;
  if (orig == NULL || orig == *dest)
    return 0;
  if (*dest == NULL) {
    *dest = meta_data_clone(orig);
    return (*dest != NULL) ? 0 : -ENOMEM;
  }
  /* Copies first, then merges: never holds both locks at once. */
  vcd_md_entry *entries = NULL;
  if (!md_clone_entries(orig, &entries))
    return -ENOMEM;
  pthread_mutex_lock(&(*dest)->lock);
  while (entries != NULL) {
    vcd_md_entry *next = entries->next;
    md_insert_locked(*dest, entries);
    entries = next;
  }
  pthread_mutex_unlock(&(*dest)->lock);
  return 0;
}

void meta_data_destroy(meta_data_t *md) {
  if (md == NULL)
    return;
  md_entries_free(md->head);
  pthread_mutex_destroy(&md->lock);
  free(md);
}

int meta_data_exists(meta_data_t *md, const char *key) {
  if (md == NULL || key == NULL)
    return -EINVAL;
  pthread_mutex_lock(&md->lock);
  int found = (md_lookup_locked(md, key) != NULL);
  pthread_mutex_unlock(&md->lock);
  return found;
}

int meta_data_type(meta_data_t *md, const char *key) {
  if (md == NULL || key == NULL)
    return -EINVAL;
  pthread_mutex_lock(&md->lock);
  vcd_md_entry *e = md_lookup_locked(md, key);
  int type = (e != NULL) ? e->type : 0;
  pthread_mutex_unlock(&md->lock);
  return type;
}

int meta_data_toc(meta_data_t *md, char ***toc) {
  if (md == NULL || toc == NULL)
    return -EINVAL;
  *toc = NULL;
  pthread_mutex_lock(&md->lock);
  int count = 0;
  for (const vcd_md_entry *e = md->head; e != NULL; e = e->next)
    count++;
  char **keys = (count > 0) ? calloc((size_t)count, sizeof(*keys)) : NULL;
  int i = 0;
  for (const vcd_md_entry *e = md->head; keys != NULL && e != NULL; e = e->next) {
    keys[i] = strdup(e->key);
    if (keys[i++] == NULL) {
      strarray_free(keys, (size_t)i);
      keys = NULL;
    }
  }
  pthread_mutex_unlock(&md->lock);
  if (count > 0 && keys == NULL)
    return -ENOMEM;
  *toc = keys;
  return count;
}

int meta_data_delete(meta_data_t *md, const char *key) {
  if (md == NULL || key == NULL)
    return -EINVAL;
  pthread_mutex_lock(&md->lock);
  vcd_md_entry **link = &md->head;
  while (*link != NULL && strcasecmp((*link)->key, key) != 0)
    link = &(*link)->next;
  vcd_md_entry *e = *link;
  if (e != NULL)
    *link = e->next;
  pthread_mutex_unlock(&md->lock);
  if (e == NULL)
    return -ENOENT;
  md_entry_free(e);
  return 0;
}

int meta_data_add_string(meta_data_t *md, const char *key, const char *value) {
  if (md == NULL || key == NULL || value == NULL)
    return -EINVAL;
  return md_insert(md, md_entry_new(key, MD_TYPE_STRING, value));
}

/* Adds the type and value of `value` under `key`, in place of an entry
 * with that key. */
static int md_add(meta_data_t *md, const char *key, const vcd_md_entry *value) {
  if (md == NULL || key == NULL)
    return -EINVAL;
  return md_insert(md, md_entry_clone(key, value));
}

int meta_data_add_signed_int(meta_data_t *md, const char *key, int64_t value) {
  vcd_md_entry e = {.type = MD_TYPE_SIGNED_INT, .value.mv_signed_int = value};
  return md_add(md, key, &e);
}

int meta_data_add_unsigned_int(meta_data_t *md, const char *key, uint64_t value) {
  vcd_md_entry e = {.type = MD_TYPE_UNSIGNED_INT, .value.mv_unsigned_int = value};
  return md_add(md, key, &e);
}

int meta_data_add_double(meta_data_t *md, const char *key, double value) {
  vcd_md_entry e = {.type = MD_TYPE_DOUBLE, .value.mv_double = value};
  return md_add(md, key, &e);
}

int meta_data_add_boolean(meta_data_t *md, const char *key, bool value) {
  vcd_md_entry e = {.type = MD_TYPE_BOOLEAN, .value.mv_boolean = value};
  return md_add(md, key, &e);
}

/* Copies the value of `key` into `out` if it has `type`. 0, -ENOENT when
 * missing or of another type (as collectd does), -ENOMEM. */
static int md_get(meta_data_t *md, const char *key, int type, void *out) {
  if (md == NULL || key == NULL || out == NULL)
    return -EINVAL;
  int status = 0;
  pthread_mutex_lock(&md->lock);
  vcd_md_entry *e = md_lookup_locked(md, key);
  if (e == NULL || e->type != type) {
    if (e != NULL)
      ERROR("meta_data_get: Type mismatch for key `%s'", e->key);
    status = -ENOENT;
  } else if (type == MD_TYPE_STRING) {
    char *copy = strdup(e->value.mv_string);
    if (copy == NULL)
      status = -ENOMEM;
    else
      *(char **)out = copy;
  } else if (type == MD_TYPE_SIGNED_INT) {
    *(int64_t *)out = e->value.mv_signed_int;
  } else if (type == MD_TYPE_UNSIGNED_INT) {
    *(uint64_t *)out = e->value.mv_unsigned_int;
  } else if (type == MD_TYPE_DOUBLE) {
    *(double *)out = e->value.mv_double;
  } else {
    *(bool *)out = e->value.mv_boolean;
  }
  pthread_mutex_unlock(&md->lock);
  return status;
}

int meta_data_get_string(meta_data_t *md, const char *key, char **value) {
  return md_get(md, key, MD_TYPE_STRING, value);
}

int meta_data_get_signed_int(meta_data_t *md, const char *key, int64_t *value) {
  return md_get(md, key, MD_TYPE_SIGNED_INT, value);
}

int meta_data_get_unsigned_int(meta_data_t *md, const char *key, uint64_t *value) {
  return md_get(md, key, MD_TYPE_UNSIGNED_INT, value);
}

int meta_data_get_double(meta_data_t *md, const char *key, double *value) {
  return md_get(md, key, MD_TYPE_DOUBLE, value);
}

int meta_data_get_boolean(meta_data_t *md, const char *key, bool *value) {
  return md_get(md, key, MD_TYPE_BOOLEAN, value);
}

/* The value of `e` as newly allocated text (numbers as collectd prints them). */
static char *md_entry_text(const vcd_md_entry *e) {
  char buffer[128];
  switch (e->type) {
  case MD_TYPE_STRING:
    return strdup(e->value.mv_string);
  case MD_TYPE_SIGNED_INT:
    snprintf(buffer, sizeof(buffer), "%" PRIi64, e->value.mv_signed_int);
    break;
  case MD_TYPE_UNSIGNED_INT:
    snprintf(buffer, sizeof(buffer), "%" PRIu64, e->value.mv_unsigned_int);
    break;
  case MD_TYPE_DOUBLE:
    snprintf(buffer, sizeof(buffer), GAUGE_FORMAT, e->value.mv_double);
    break;
  default:
    return strdup(e->value.mv_boolean ? "true" : "false");
  }
  return strdup(buffer);
}

int meta_data_as_string(meta_data_t *md, const char *key, char **value) {
  if (md == NULL || key == NULL || value == NULL)
    return -EINVAL;
  pthread_mutex_lock(&md->lock);
  vcd_md_entry *e = md_lookup_locked(md, key);
  char *text = (e != NULL) ? md_entry_text(e) : NULL;
  pthread_mutex_unlock(&md->lock);
  if (e == NULL)
    return -ENOENT;
  if (text == NULL)
    return -ENOMEM;
  *value = text;
  return 0;
}

#pragma GCC visibility pop
