/* The cleaner's key -> latest offset map (Kafka's SkimpyOffsetMap), as one flat table.
 *
 * OffsetMap(slots, capacity): `slots` entries of 24 bytes each, allocated at once (zeroed
 * anonymous memory: pages the map never touches cost nothing; a table of 2 MiB or more is
 * asked for transparent huge pages, as its probes land anywhere in it and would otherwise
 * miss the TLB nearly every time), an entry being a key's 16-byte digest and 1 + its latest
 * offset (8 bytes; 0 marks an empty slot). The digest is the key's MD5, except that a key
 * shorter than 16 bytes is stored as it is, zero-padded, with its length in the last byte:
 * exact, and no hashing (such a value equals an MD5 digest only if someone found an MD5
 * preimage). Open addressing with double hashing: a mix of the digest picks the slot,
 * another the step, and `slots` is prime, so a probe sequence visits every slot. The map
 * takes at most `capacity` keys (slots x log.cleaner.io.buffer.load.factor, below `slots`,
 * so a probe always ends on an empty slot).
 *
 *   put(key, offset) -> bool   the key's latest offset is now `offset`; False (and nothing
 *                              stored) when the key is new and the map holds `capacity`
 *   put_records(records, count, base_offset, first_dirty) -> int
 *                              put the key and offset of every keyed record at or after
 *                              first_dirty of a batch's (uncompressed) records section,
 *                              `count` records (v2 format); -1 when all went in, else the
 *                              offset of the first that did not fit (none of the later ones
 *                              was put). ValueError when the records are malformed.
 *   get(key) -> int            the key's latest offset, -1 if it is not in the map
 *   has_room_for(n) -> bool    n more keys fit (an empty map takes any number: its caller
 *                              puts what fits and ends the pass there)
 *   len(map), .slots, .capacity, .latest_offset (read-write: the last offset the map
 *   accounts for, -1 at first)
 * md5(data) -> bytes           MD5 (for tests: hashlib's), the digest of keys of 16 bytes on.
 *
 * MD5 as RFC 1321 describes it; the cleaner needs a 128-bit digest only to tell keys apart.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "structmember.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

/* -- MD5 (RFC 1321) ------------------------------------------------------------------------ */
static uint32_t md5_k[64];
static const uint8_t md5_r[64] = {
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
    5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
    6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
};

static void md5_init_table(void)
{
    for (int i = 0; i < 64; i++)
        md5_k[i] = (uint32_t)(fabs(sin((double)(i + 1))) * 4294967296.0);
}

static inline uint32_t rotl32(uint32_t x, unsigned n) { return (x << n) | (x >> (32 - n)); }

static inline uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static void md5_block(uint32_t state[4], const uint8_t *block)
{
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = load_le32(block + 4 * i);
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3], f;
#define MD5_STEP(i, expr, g)                                                                   \
    f = (expr) + a + md5_k[i] + m[g];                                                          \
    a = d;                                                                                     \
    d = c;                                                                                     \
    c = b;                                                                                     \
    b = b + rotl32(f, md5_r[i]);
    for (int i = 0; i < 16; i++) {
        MD5_STEP(i, (b & c) | (~b & d), i)
    }
    for (int i = 16; i < 32; i++) {
        MD5_STEP(i, (d & b) | (~d & c), (5 * i + 1) & 15)
    }
    for (int i = 32; i < 48; i++) {
        MD5_STEP(i, b ^ c ^ d, (3 * i + 5) & 15)
    }
    for (int i = 48; i < 64; i++) {
        MD5_STEP(i, c ^ (b | ~d), (7 * i) & 15)
    }
#undef MD5_STEP
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
}

static void md5(const uint8_t *data, size_t len, uint8_t out[16])
{
    uint32_t state[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
    uint64_t bits = (uint64_t)len * 8;
    size_t whole = len & ~(size_t)63;
    for (size_t i = 0; i < whole; i += 64)
        md5_block(state, data + i);
    uint8_t tail[128];
    size_t rest = len - whole;
    memcpy(tail, data + whole, rest);
    tail[rest] = 0x80;
    size_t tail_len = rest < 56 ? 64 : 128;
    memset(tail + rest + 1, 0, tail_len - rest - 1);
    for (int i = 0; i < 8; i++)
        tail[tail_len - 8 + i] = (uint8_t)(bits >> (8 * i));
    md5_block(state, tail);
    if (tail_len == 128)
        md5_block(state, tail + 64);
    for (int i = 0; i < 4; i++) {
        out[4 * i] = (uint8_t)state[i];
        out[4 * i + 1] = (uint8_t)(state[i] >> 8);
        out[4 * i + 2] = (uint8_t)(state[i] >> 16);
        out[4 * i + 3] = (uint8_t)(state[i] >> 24);
    }
}

/* -- the table ----------------------------------------------------------------------------- */
typedef struct {
    uint64_t lo, hi;        /* the key's MD5 digest, as two words */
    uint64_t offset_plus_1; /* 0: an empty slot */
} Entry;

#define HUGE_PAGE ((size_t)2 << 20)

typedef struct {
    PyObject_HEAD
    Entry *table;
    void *mapping; /* the table's own mmap (huge pages), or NULL when it is PyMem's */
    size_t mapping_len;
    Py_ssize_t slots;
    Py_ssize_t capacity;
    Py_ssize_t size;
    long long latest_offset;
} OffsetMap;

static void release_table(OffsetMap *self)
{
    if (self->mapping != NULL)
        munmap(self->mapping, self->mapping_len);
    else
        PyMem_RawFree(self->table);
    self->table = NULL;
    self->mapping = NULL;
    self->mapping_len = 0;
}

/* Zeroed memory for the table; big tables on 2 MiB boundaries, asking for huge pages. */
static int allocate_table(OffsetMap *self, size_t bytes)
{
    if (bytes < HUGE_PAGE) {
        self->table = PyMem_RawCalloc(1, bytes);
        return self->table == NULL ? -1 : 0;
    }
    size_t len = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uint8_t *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return -1;
    uint8_t *start = (uint8_t *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (start > raw)
        munmap(raw, (size_t)(start - raw));
    size_t tail = (size_t)(raw + len + HUGE_PAGE - (start + len));
    if (tail)
        munmap(start + len, tail);
#ifdef MADV_HUGEPAGE
    madvise(start, len, MADV_HUGEPAGE); /* advice: without it the map only runs slower */
#endif
    self->table = (Entry *)start;
    self->mapping = start;
    self->mapping_len = len;
    return 0;
}

static int offsetmap_init(OffsetMap *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"slots", "capacity", NULL};
    Py_ssize_t slots, capacity;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nn", kwlist, &slots, &capacity))
        return -1;
    if (slots < 2 || capacity < 1 || capacity >= slots) {
        PyErr_SetString(PyExc_ValueError, "an offset map needs 2 <= slots and 1 <= capacity < slots");
        return -1;
    }
    release_table(self);
    if (allocate_table(self, (size_t)slots * sizeof(Entry)) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    self->slots = slots;
    self->capacity = capacity;
    self->size = 0;
    self->latest_offset = -1;
    return 0;
}

static void offsetmap_dealloc(OffsetMap *self)
{
    release_table(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline void digest_of(const uint8_t *key, size_t len, uint8_t digest[16])
{
    if (len < 16) {
        memset(digest, 0, 16);
        memcpy(digest, key, len);
        digest[15] = (uint8_t)len;
    } else {
        md5(key, len, digest);
    }
}

/* The digest of a bytes (or other buffer) key; -1 with an exception set. */
static int key_digest(PyObject *key, uint64_t *lo, uint64_t *hi)
{
    uint8_t digest[16];
    if (PyBytes_CheckExact(key)) {
        digest_of((const uint8_t *)PyBytes_AS_STRING(key), (size_t)PyBytes_GET_SIZE(key),
                  digest);
    } else {
        Py_buffer view;
        if (PyObject_GetBuffer(key, &view, PyBUF_SIMPLE) < 0)
            return -1;
        digest_of((const uint8_t *)view.buf, (size_t)view.len, digest);
        PyBuffer_Release(&view);
    }
    memcpy(lo, digest, 8);
    memcpy(hi, digest + 8, 8);
    return 0;
}

/* splitmix64's finaliser: every bit of x moves every bit of the result. */
static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* The slot holding the digest, or the empty slot where it would go. */
static inline Entry *find(OffsetMap *self, uint64_t lo, uint64_t hi)
{
    uint64_t slots = (uint64_t)self->slots;
    uint64_t h = mix64(lo ^ mix64(hi));
    uint64_t i = h % slots;
    uint64_t step = 1 + mix64(h ^ 0x9e3779b97f4a7c15ull) % (slots - 1);
    for (;;) {
        Entry *e = &self->table[i];
        if (e->offset_plus_1 == 0 || (e->lo == lo && e->hi == hi))
            return e;
        i += step;
        if (i >= slots)
            i -= slots;
    }
}

static int check_ready(OffsetMap *self)
{
    if (self->table != NULL)
        return 0;
    PyErr_SetString(PyExc_ValueError, "the offset map was not initialised");
    return -1;
}

/* Stores the digest's offset; 0 when the digest is new and the map is full. */
static inline int store(OffsetMap *self, uint64_t lo, uint64_t hi, long long offset)
{
    Entry *e = find(self, lo, hi);
    if (e->offset_plus_1 == 0) {
        if (self->size >= self->capacity)
            return 0;
        e->lo = lo;
        e->hi = hi;
        self->size++;
    }
    e->offset_plus_1 = (uint64_t)offset + 1;
    return 1;
}

static PyObject *offsetmap_put(OffsetMap *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "put(key, offset)");
        return NULL;
    }
    long long offset = PyLong_AsLongLong(args[1]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    if (offset < 0) {
        PyErr_SetString(PyExc_ValueError, "offsets are not negative");
        return NULL;
    }
    uint64_t lo, hi;
    if (check_ready(self) < 0 || key_digest(args[0], &lo, &hi) < 0)
        return NULL;
    return PyBool_FromLong(store(self, lo, hi, offset));
}

/* A zigzag varint at *pos of data[0:n]; -1 past the end, -2 too long. */
static inline int read_varint(const uint8_t *d, Py_ssize_t n, Py_ssize_t *pos, int64_t *out)
{
    uint64_t raw = 0;
    int shift = 0;
    for (;;) {
        if (*pos >= n)
            return -1;
        uint8_t b = d[(*pos)++];
        if (shift < 64)
            raw |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) {
            *out = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
            return 0;
        }
        shift += 7;
        if (shift > 63)
            return -2;
    }
}

static PyObject *corrupt(int rc, const char *what)
{
    PyErr_Format(PyExc_ValueError, "%s", rc == -2 ? "varint is too long" : what);
    return NULL;
}

static PyObject *offsetmap_put_records(OffsetMap *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "put_records(records, count, base_offset, first_dirty)");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long long base = PyLong_AsLongLong(args[2]);
    long long first_dirty = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred() || check_ready(self) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *d = view.buf;
    Py_ssize_t n = view.len, pos = 0;
    PyObject *answer = NULL;
    long long stopped = -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, key_len;
        int rc = read_varint(d, n, &pos, &length);
        if (rc < 0) {
            corrupt(rc, "record runs past the end of its batch");
            goto done;
        }
        Py_ssize_t body = pos;
        if (length < 0 || length > n - body) {
            corrupt(-1, length < 0 ? "record fields run past its length"
                                   : "record runs past the end of its batch");
            goto done;
        }
        Py_ssize_t end = body + (Py_ssize_t)length;
        Py_ssize_t p = body + 1; /* after the attributes byte */
        if ((rc = read_varint(d, end, &p, &ts_delta)) < 0 ||
            (rc = read_varint(d, end, &p, &offset_delta)) < 0 ||
            (rc = read_varint(d, end, &p, &key_len)) < 0) {
            corrupt(rc, "record fields run past its length");
            goto done;
        }
        if (key_len >= 0) {
            if (key_len >= end - p) { /* the value's length must follow the key */
                corrupt(-1, "record fields run past its length");
                goto done;
            }
            long long offset = base + offset_delta;
            if (offset >= first_dirty) {
                uint8_t digest[16];
                uint64_t lo, hi;
                digest_of(d + p, (size_t)key_len, digest);
                memcpy(&lo, digest, 8);
                memcpy(&hi, digest + 8, 8);
                if (!store(self, lo, hi, offset)) {
                    stopped = offset;
                    break;
                }
            }
        } else if (p >= end) {
            corrupt(-1, "record fields run past its length");
            goto done;
        }
        pos = end;
    }
    if (stopped < 0 && pos != n) {
        corrupt(-1, "record batch has bytes after its last record");
        goto done;
    }
    answer = PyLong_FromLongLong(stopped);
done:
    PyBuffer_Release(&view);
    return answer;
}

static PyObject *offsetmap_get(OffsetMap *self, PyObject *key)
{
    uint64_t lo, hi;
    if (check_ready(self) < 0 || key_digest(key, &lo, &hi) < 0)
        return NULL;
    Entry *e = find(self, lo, hi);
    return PyLong_FromLongLong((long long)e->offset_plus_1 - 1);
}

static PyObject *offsetmap_has_room_for(OffsetMap *self, PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(self->size == 0 || n <= self->capacity - self->size);
}

static Py_ssize_t offsetmap_len(OffsetMap *self) { return self->size; }

static PyMethodDef offsetmap_methods[] = {
    {"put", (PyCFunction)(void (*)(void))offsetmap_put, METH_FASTCALL,
     "put(key, offset) -> bool: False when the key is new and the map is full."},
    {"put_records", (PyCFunction)(void (*)(void))offsetmap_put_records, METH_FASTCALL,
     "put_records(records, count, base_offset, first_dirty) -> -1, or the first offset that "
     "did not fit."},
    {"get", (PyCFunction)offsetmap_get, METH_O, "get(key) -> the key's latest offset, or -1."},
    {"has_room_for", (PyCFunction)offsetmap_has_room_for, METH_O,
     "has_room_for(n) -> n more keys fit (an empty map takes any number)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef offsetmap_members[] = {
    {"slots", T_PYSSIZET, offsetof(OffsetMap, slots), READONLY, "24-byte entries"},
    {"capacity", T_PYSSIZET, offsetof(OffsetMap, capacity), READONLY, "most keys taken"},
    {"latest_offset", T_LONGLONG, offsetof(OffsetMap, latest_offset), 0,
     "the last offset the map accounts for"},
    {NULL, 0, 0, 0, NULL},
};

static PySequenceMethods offsetmap_as_sequence = {
    .sq_length = (lenfunc)offsetmap_len,
};

static PyTypeObject OffsetMapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gregor.log._offsetmap.OffsetMap",
    .tp_doc = "A key -> latest offset map in one preallocated table of 24-byte entries.",
    .tp_basicsize = sizeof(OffsetMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)offsetmap_init,
    .tp_dealloc = (destructor)offsetmap_dealloc,
    .tp_methods = offsetmap_methods,
    .tp_members = offsetmap_members,
    .tp_as_sequence = &offsetmap_as_sequence,
};

static PyObject *md5_digest(PyObject *Py_UNUSED(self), PyObject *data)
{
    Py_buffer view;
    uint8_t digest[16];
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    md5((const uint8_t *)view.buf, (size_t)view.len, digest);
    PyBuffer_Release(&view);
    return PyBytes_FromStringAndSize((const char *)digest, 16);
}

static PyMethodDef module_methods[] = {
    {"md5", md5_digest, METH_O, "md5(data) -> the 16-byte digest the map keys on."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gregor.log._offsetmap", "The log cleaner's offset map.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__offsetmap(void)
{
    md5_init_table();
    if (PyType_Ready(&OffsetMapType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&OffsetMapType);
    if (PyModule_AddObject(m, "OffsetMap", (PyObject *)&OffsetMapType) < 0) {
        Py_DECREF(&OffsetMapType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
