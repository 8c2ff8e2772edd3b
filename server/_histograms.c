/* Count a batch of finished requests into their time histograms (server/metrics.py): the
 * per-request part of recording metrics, which in Python cost about a microsecond a
 * request, a third of what metrics cost the hot path.
 *
 * count(batch, requests, unit_ns, buckets, slots)
 *   batch: list of request timings (apis/timing.py: kind, version, received, dequeued,
 *          local_done, sent, end, throttle_ms, ...), ints;
 *   requests: dict kind -> RequestStats, whose `versions` and `data` are array('q');
 *   a time of ns nanoseconds falls in bucket bit_length(ns / unit_ns), at most `buckets`
 *   (the +Inf bucket); a histogram is `slots` int64s: the buckets, +Inf, the sum (ns).
 * Histograms in `data`, in order: total, request queue, local, remote, response send,
 * throttle; a throttle of 0 ms counts in the first bucket, as an answer at once does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum { KIND, VERSION, RECEIVED, DEQUEUED, LOCAL_DONE, SENT, END, THROTTLE_MS, FIELDS };
enum { TOTAL, QUEUE, LOCAL, REMOTE, SEND, THROTTLE, HISTOGRAMS };

static void observe(int64_t *histogram, int64_t ns, int64_t unit_ns, int64_t buckets,
                    int64_t slots)
{
    int64_t units = ns > 0 ? ns / unit_ns : 0;
    int64_t k = units > 0 ? 64 - __builtin_clzll((uint64_t)units) : 0;
    histogram[k < buckets ? k : buckets] += 1;
    histogram[slots - 1] += ns;
}

/* A writable int64 buffer of at least `need` items, or -1 with an exception set. */
static int int64_buffer(PyObject *obj, const char *name, Py_ssize_t need, Py_buffer *view)
{
    PyObject *array = PyObject_GetAttrString(obj, name);
    if (array == NULL)
        return -1;
    int rc = PyObject_GetBuffer(array, view, PyBUF_WRITABLE | PyBUF_FORMAT);
    Py_DECREF(array);
    if (rc < 0)
        return -1;
    if (view->itemsize != 8 || view->format == NULL || strcmp(view->format, "q") != 0 ||
        view->len / 8 < need) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be an array('q') of %zd or more", name, need);
        return -1;
    }
    return 0;
}

static PyObject *count(PyObject *self, PyObject *args)
{
    PyObject *batch, *requests;
    long long unit_ns, buckets, slots;
    if (!PyArg_ParseTuple(args, "O!O!LLL", &PyList_Type, &batch, &PyDict_Type, &requests,
                          &unit_ns, &buckets, &slots))
        return NULL;
    if (unit_ns <= 0 || buckets <= 0 || slots != buckets + 2) {
        PyErr_SetString(PyExc_ValueError, "bad histogram layout");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(batch);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(batch, i);
        if (!PyList_Check(item) || PyList_GET_SIZE(item) < FIELDS) {
            PyErr_SetString(PyExc_TypeError, "a request timing is a list of its fields");
            return NULL;
        }
        int64_t f[FIELDS];
        for (int j = 0; j < FIELDS; j++) {
            f[j] = PyLong_AsLongLong(PyList_GET_ITEM(item, j));
            if (f[j] == -1 && PyErr_Occurred())
                return NULL;
        }
        PyObject *stats = PyDict_GetItemWithError(requests, PyList_GET_ITEM(item, KIND));
        if (stats == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_KeyError, "no request type %lld", (long long)f[KIND]);
            return NULL;
        }
        Py_buffer versions, data;
        if (int64_buffer(stats, "versions", f[VERSION] + 1, &versions) < 0)
            return NULL;
        if (f[VERSION] < 0 || int64_buffer(stats, "data", HISTOGRAMS * slots, &data) < 0) {
            PyBuffer_Release(&versions);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "negative request version");
            return NULL;
        }
        ((int64_t *)versions.buf)[f[VERSION]] += 1;
        int64_t *h = data.buf;
        int64_t end = f[END];
        int64_t sent = f[SENT] ? f[SENT] : end;
        int64_t local_done = f[LOCAL_DONE] ? f[LOCAL_DONE] : sent;
        observe(h + TOTAL * slots, end - f[RECEIVED], unit_ns, buckets, slots);
        observe(h + QUEUE * slots, f[DEQUEUED] - f[RECEIVED], unit_ns, buckets, slots);
        observe(h + LOCAL * slots, local_done - f[DEQUEUED], unit_ns, buckets, slots);
        observe(h + REMOTE * slots, sent - local_done, unit_ns, buckets, slots);
        observe(h + SEND * slots, end - sent, unit_ns, buckets, slots);
        if (f[THROTTLE_MS] > 0) {
            /* whole milliseconds: 1 ms is in the bucket le="1" */
            int64_t ns = f[THROTTLE_MS] * 1000000;
            observe(h + THROTTLE * slots, ns - 1, unit_ns, buckets, slots);
            h[THROTTLE * slots + slots - 1] += 1; /* the sum is of ns, not ns - 1 */
        } else {
            h[THROTTLE * slots] += 1;
        }
        PyBuffer_Release(&data);
        PyBuffer_Release(&versions);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"count", count, METH_VARARGS, "Count finished requests into their histograms."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_histograms", NULL, -1, methods,
};

PyMODINIT_FUNC PyInit__histograms(void) { return PyModule_Create(&module); }
