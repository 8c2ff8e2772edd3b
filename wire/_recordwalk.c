/* Walk the records section of one RecordBatch v2 (uncompressed or decompressed) and check
 * every record as Kafka's DefaultRecord.readFrom and LogValidator do, without the GIL.
 *
 * walk(records, count, base_timestamp, ts_min, ts_max, need_keys)
 *   -> the largest record timestamp (-1 if none is larger), or
 *      (kind, record_index, value, reason) for the first problem found:
 *   kind 1 FRAMING: the bytes are not `count` well-formed records (stops the walk);
 *   kind 2 NO_KEY: a record without a key while need_keys (compacted topics);
 *   kind 3 TIMESTAMP: a record timestamp other than -1 outside [ts_min, ts_max].
 * A framing problem anywhere wins over a key or timestamp problem of an earlier record.
 *
 * bad_records(records, count, base_timestamp, ts_min, ts_max, need_keys)
 *   -> [(record_index, None | timestamp)] for every record of a bad batch, in one pass: None
 *      for a missing key (while need_keys), else its timestamp when out of range; ValueError
 *      if the records are not well framed (walk reports that first).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum { OK = 0, FRAMING = 1, NO_KEY = 2, TIMESTAMP = 3 };

typedef struct {
    int kind;
    int64_t index;
    int64_t value;
    const char *reason;
} problem;

/* A zigzag varint of at most max_bytes bytes (5: int32 as Java's readVarint, 10: int64). */
static int read_varint(const uint8_t **p, const uint8_t *limit, int max_bytes, int64_t *out)
{
    uint64_t raw = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*p >= limit)
            return 0;
        uint8_t b = *(*p)++;
        raw |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            if (max_bytes == 5) {
                uint32_t r = (uint32_t)raw;
                *out = (int32_t)((r >> 1) ^ (0u - (r & 1)));
            } else {
                *out = (int64_t)((raw >> 1) ^ (0 - (raw & 1)));
            }
            return 1;
        }
    }
    return 0;
}

/* Skip a length-prefixed field (a negative length is null, as in Java); 0 if it overruns. */
static int skip_bytes(const uint8_t **p, const uint8_t *end, int64_t *length)
{
    if (!read_varint(p, end, 5, length))
        return 0;
    if (*length < 0)
        return 1;
    if (*length > end - *p)
        return 0;
    *p += *length;
    return 1;
}

static void fail(problem *pr, int kind, int64_t index, int64_t value, const char *reason)
{
    pr->kind = kind;
    pr->index = index;
    pr->value = value;
    pr->reason = reason;
}

/* Read record i's framing up to its end; 0 (with the problem in pr) if it is malformed. */
static inline int next_record(const uint8_t **pp, const uint8_t *end, int64_t i,
                              int64_t *ts_delta, int64_t *key_length, problem *pr)
{
    const uint8_t *p = *pp;
    int64_t length = 0, offset_delta = 0, value_length = 0, header_count = 0, n = 0;
    if (!read_varint(&p, end, 5, &length))
        return fail(pr, FRAMING, i, 0, "record length is truncated"), 0;
    if (length < 1 || length > end - p)
        return fail(pr, FRAMING, i, length, "record length is out of range"), 0;
    const uint8_t *record_end = p + length;
    p++; /* attributes */
    if (!read_varint(&p, record_end, 10, ts_delta))
        return fail(pr, FRAMING, i, 0, "timestamp delta runs past the record"), 0;
    if (!read_varint(&p, record_end, 5, &offset_delta))
        return fail(pr, FRAMING, i, 0, "offset delta runs past the record"), 0;
    if (offset_delta != i)
        return fail(pr, FRAMING, i, offset_delta, "offset delta is not the record's index"), 0;
    if (!skip_bytes(&p, record_end, key_length))
        return fail(pr, FRAMING, i, *key_length, "key length is out of range"), 0;
    if (!skip_bytes(&p, record_end, &value_length))
        return fail(pr, FRAMING, i, value_length, "value length is out of range"), 0;
    if (!read_varint(&p, record_end, 5, &header_count) || header_count < 0)
        return fail(pr, FRAMING, i, header_count, "header count is invalid"), 0;
    for (int64_t h = 0; h < header_count; h++) {
        if (!read_varint(&p, record_end, 5, &n) || n < 0 || n > record_end - p)
            return fail(pr, FRAMING, i, n, "header key length is out of range"), 0;
        p += n;
        if (!skip_bytes(&p, record_end, &n))
            return fail(pr, FRAMING, i, n, "header value length is out of range"), 0;
    }
    if (p != record_end)
        return fail(pr, FRAMING, i, length, "record length does not match its fields"), 0;
    *pp = p;
    return 1;
}

/* Java adds longs with wrap-around; so do we, in unsigned arithmetic. */
static inline int64_t add_wrapping(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}

static void walk(const uint8_t *p, const uint8_t *end, int64_t count, int64_t base_ts,
                 int64_t ts_min, int64_t ts_max, int need_keys, problem *pr, int64_t *max_ts)
{
    problem first = {OK, 0, 0, NULL};
    *max_ts = -1;
    for (int64_t i = 0; i < count; i++) {
        int64_t ts_delta = 0, key_length = 0;
        if (!next_record(&p, end, i, &ts_delta, &key_length, pr))
            return;
        int64_t ts = add_wrapping(base_ts, ts_delta);
        if (ts > *max_ts)
            *max_ts = ts;
        if (first.kind != OK)
            continue;
        if (need_keys && key_length < 0) {
            fail(&first, NO_KEY, i, 0, "compacted topic cannot accept a record without a key");
            continue;
        }
        if (ts != -1 && (ts < ts_min || ts > ts_max))
            fail(&first, TIMESTAMP, i, ts, "timestamp is out of range");
    }
    if (p != end)
        return fail(pr, FRAMING, count, end - p, "bytes remain after the last record");
    *pr = first;
}

static PyObject *py_walk(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    long long count, base_ts, ts_min, ts_max;
    int need_keys;
    if (!PyArg_ParseTuple(args, "y*LLLLp", &buf, &count, &base_ts, &ts_min, &ts_max, &need_keys))
        return NULL;
    problem pr = {OK, 0, 0, NULL};
    int64_t max_ts = -1;
    const uint8_t *start = (const uint8_t *)buf.buf;
    Py_BEGIN_ALLOW_THREADS
    walk(start, start + buf.len, count, base_ts, ts_min, ts_max, need_keys, &pr, &max_ts);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (pr.kind == OK)
        return PyLong_FromLongLong(max_ts);
    return Py_BuildValue("(iLLs)", pr.kind, (long long)pr.index, (long long)pr.value, pr.reason);
}

static PyObject *py_bad_records(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    long long count, base_ts, ts_min, ts_max;
    int need_keys;
    if (!PyArg_ParseTuple(args, "y*LLLLp", &buf, &count, &base_ts, &ts_min, &ts_max, &need_keys))
        return NULL;
    PyObject *bad = PyList_New(0);
    const uint8_t *p = (const uint8_t *)buf.buf, *end = p + buf.len;
    problem pr = {OK, 0, 0, NULL};
    for (int64_t i = 0; bad != NULL && i < count; i++) {
        int64_t ts_delta = 0, key_length = 0;
        if (!next_record(&p, end, i, &ts_delta, &key_length, &pr))
            break;
        int64_t ts = add_wrapping(base_ts, ts_delta);
        PyObject *entry = NULL;
        if (need_keys && key_length < 0)
            entry = Py_BuildValue("(LO)", (long long)i, Py_None);
        else if (ts != -1 && (ts < ts_min || ts > ts_max))
            entry = Py_BuildValue("(LL)", (long long)i, (long long)ts);
        else
            continue;
        if (entry == NULL || PyList_Append(bad, entry) < 0)
            Py_CLEAR(bad);
        Py_XDECREF(entry);
    }
    PyBuffer_Release(&buf);
    if (bad != NULL && pr.kind != OK) {
        Py_DECREF(bad);
        PyErr_Format(PyExc_ValueError, "record %lld: %s", (long long)pr.index, pr.reason);
        return NULL;
    }
    return bad;
}

static PyMethodDef methods[] = {
    {"walk", py_walk, METH_VARARGS,
     "walk(records, count, base_timestamp, ts_min, ts_max, need_keys) -> max timestamp or "
     "(kind, record_index, value, reason)"},
    {"bad_records", py_bad_records, METH_VARARGS,
     "bad_records(records, count, base_timestamp, ts_min, ts_max, need_keys) -> "
     "[(record_index, None for a missing key or the bad timestamp)]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gregor.wire._recordwalk", "Record walking for produce validation.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__recordwalk(void)
{
    return PyModule_Create(&module);
}
