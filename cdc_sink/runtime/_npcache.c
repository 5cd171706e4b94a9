/*
 * A numpy memory handler that keeps freed array buffers for reuse (cdc_sink.runtime.numpy_pool).
 *
 * glibc serves a large malloc from fresh mmap'd pages and unmaps them on free, so every
 * micro-batch page-faults its working arrays back in (the kernel zeroes each 4 KB page
 * again). This handler rounds buffers of at least MIN_CACHED bytes up to a size class
 * (sixteen per power of two, so at most 6.25% slack) and keeps freed ones, up to `limit`
 * bytes in all, for the next array of the same class. Smaller buffers go straight to
 * malloc. Every buffer carries a 16-byte header (its capacity and whether it is
 * cacheable), so realloc and free need nothing else; user pointers stay 16-byte aligned
 * as malloc's are.
 *
 * numpy's handler API (NEP 49): a PyCapsule named "mem_handler" holding a
 * PyDataMem_Handler, installed for the current context with PyDataMem_SetHandler. The
 * two structures and the two C-API slots are declared here as numpy >= 1.22 defines
 * them (its C API only ever appends), so the module builds without numpy's headers;
 * `install` checks numpy's C feature version before using them.
 *
 * The free lists are shared by every thread and guarded by one mutex: numpy may
 * allocate or free with or without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_cmodule.h"
#include <pthread.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} DataMemAllocator;

typedef struct {
    char name[127];
    uint8_t version;
    DataMemAllocator allocator;
} DataMemHandler;

#define SLOT_C_FEATURE_VERSION 211 /* PyArray_GetNDArrayCFeatureVersion */
#define SLOT_SET_HANDLER 304       /* PyDataMem_SetHandler */
#define NPY_1_22_API_VERSION 0x0000000f

#define HEADER 16
#define MIN_CACHED ((size_t)1 << 16)
#define NUM_CLASSES 512

typedef struct Header {
    size_t capacity; /* bytes usable after the header */
    size_t cached;   /* 1: a size-class buffer, kept on free */
} Header;

typedef struct Free {
    struct Free *next;
} Free;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Free *bins[NUM_CLASSES];
static size_t limit = (size_t)256 << 20;
static size_t idle = 0;
static unsigned long long hits = 0, misses = 0;

/* The size class of MIN_CACHED <= n < 2^46 bytes: its index and capacity, n rounded up
 * to a multiple of 2^m / 16 where 2^m <= n < 2^(m+1). */
static int size_class(size_t n, size_t *capacity) {
    int m = 63 - __builtin_clzll((unsigned long long)n);
    size_t step = (size_t)1 << (m - 4);
    size_t units = (n + step - 1) / step; /* 16..32 */
    *capacity = units * step;
    return (m - 16) * 16 + (int)units - 16;
}

static void *fresh(size_t capacity, size_t cached, int zero) {
    Header *h = zero ? calloc(1, capacity + HEADER) : malloc(capacity + HEADER);
    if (h == NULL) return NULL;
    h->capacity = capacity;
    h->cached = cached;
    return (char *)h + HEADER;
}

static void *take(size_t n, int zero) {
    if (n == 0) n = 1;
    if (n > (size_t)1 << 46) return NULL;
    if (n < MIN_CACHED) return fresh(n, 0, zero);
    size_t capacity;
    int c = size_class(n, &capacity);
    Free *f = NULL;
    {
        pthread_mutex_lock(&lock);
        f = bins[c];
        if (f != NULL) {
            bins[c] = f->next;
            idle -= capacity;
            hits++;
        } else {
            misses++;
        }
        pthread_mutex_unlock(&lock);
    }
    if (f == NULL) return fresh(capacity, 1, zero);
    if (zero) memset(f, 0, n);
    return f; /* the header before it is still right */
}

static void *h_malloc(void *ctx, size_t n) {
    (void)ctx;
    return take(n, 0);
}

static void *h_calloc(void *ctx, size_t nelem, size_t elsize) {
    (void)ctx;
    if (elsize != 0 && nelem > SIZE_MAX / elsize) return NULL;
    return take(nelem * elsize, 1);
}

static void h_free(void *ctx, void *p, size_t size) {
    (void)ctx;
    (void)size;
    if (p == NULL) return;
    Header *h = (Header *)((char *)p - HEADER);
    if (h->cached) {
        size_t capacity;
        int c = size_class(h->capacity, &capacity);
        pthread_mutex_lock(&lock);
        if (idle + h->capacity <= limit) {
            Free *f = p;
            f->next = bins[c];
            bins[c] = f;
            idle += h->capacity;
            p = NULL;
        }
        pthread_mutex_unlock(&lock);
        if (p == NULL) return;
    }
    free(h);
}

static void *h_realloc(void *ctx, void *p, size_t n) {
    if (p == NULL) return h_malloc(ctx, n);
    Header *h = (Header *)((char *)p - HEADER);
    if (n <= h->capacity && n >= h->capacity / 2) return p;
    if (!h->cached && n < MIN_CACHED) {
        Header *g = realloc(h, (n ? n : 1) + HEADER);
        if (g == NULL) return NULL;
        g->capacity = n ? n : 1;
        return (char *)g + HEADER;
    }
    void *q = h_malloc(ctx, n);
    if (q == NULL) return NULL;
    memcpy(q, p, n < h->capacity ? n : h->capacity);
    h_free(ctx, p, h->capacity);
    return q;
}

static DataMemHandler handler = {
    "cdc_sink_reuse", 1, {NULL, h_malloc, h_calloc, h_realloc, h_free}};

static PyObject *capsule = NULL; /* the handler, made once */
static void **numpy_api = NULL;

static int load_numpy_api(void) {
    if (numpy_api != NULL) return 0;
    PyObject *mod = PyImport_ImportModule("numpy._core._multiarray_umath");
    if (mod == NULL) {
        PyErr_Clear();
        mod = PyImport_ImportModule("numpy.core._multiarray_umath");
    }
    if (mod == NULL) return -1;
    PyObject *api = PyObject_GetAttrString(mod, "_ARRAY_API");
    Py_DECREF(mod);
    if (api == NULL) return -1;
    void **table = PyCapsule_GetPointer(api, NULL);
    Py_DECREF(api);
    if (table == NULL) return -1;
    unsigned int (*version)(void) = (unsigned int (*)(void))table[SLOT_C_FEATURE_VERSION];
    if (version() < NPY_1_22_API_VERSION) {
        PyErr_SetString(PyExc_RuntimeError, "numpy has no memory handler API (needs >= 1.22)");
        return -1;
    }
    numpy_api = table;
    return 0;
}

static PyObject *set_handler(PyObject *h) {
    PyObject *(*set)(PyObject *) = (PyObject * (*)(PyObject *)) numpy_api[SLOT_SET_HANDLER];
    return set(h);
}

static PyObject *install(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    if (load_numpy_api() < 0) return NULL;
    if (capsule == NULL) {
        capsule = PyCapsule_New(&handler, "mem_handler", NULL);
        if (capsule == NULL) return NULL;
    }
    return set_handler(capsule); /* the handler it replaces */
}

static PyObject *restore(PyObject *self, PyObject *previous) {
    (void)self;
    if (load_numpy_api() < 0) return NULL;
    if (!PyCapsule_IsValid(previous, "mem_handler")) {
        PyErr_SetString(PyExc_TypeError, "restore() takes the handler install() returned");
        return NULL;
    }
    PyObject *old = set_handler(previous);
    if (old == NULL) return NULL;
    Py_DECREF(old);
    Py_RETURN_NONE;
}

static size_t drop_idle(size_t keep) {
    size_t freed = 0;
    pthread_mutex_lock(&lock);
    for (int c = NUM_CLASSES - 1; c >= 0 && idle > keep; c--) {
        while (bins[c] != NULL && idle > keep) {
            Free *f = bins[c];
            bins[c] = f->next;
            Header *h = (Header *)((char *)f - HEADER);
            idle -= h->capacity;
            freed += h->capacity;
            free(h);
        }
    }
    pthread_mutex_unlock(&lock);
    return freed;
}

static PyObject *set_limit(PyObject *self, PyObject *arg) {
    (void)self;
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "the limit is a number of bytes >= 0");
        return NULL;
    }
    pthread_mutex_lock(&lock);
    limit = (size_t)n;
    pthread_mutex_unlock(&lock);
    drop_idle((size_t)n);
    Py_RETURN_NONE;
}

static PyObject *release(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    size_t freed;
    Py_BEGIN_ALLOW_THREADS
    freed = drop_idle(0);
    Py_END_ALLOW_THREADS
    return PyLong_FromSize_t(freed);
}

static PyObject *stats(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    pthread_mutex_lock(&lock);
    size_t i = idle, l = limit;
    unsigned long long h = hits, m = misses;
    pthread_mutex_unlock(&lock);
    return Py_BuildValue("(nnKK)", (Py_ssize_t)i, (Py_ssize_t)l, h, m);
}

static PyMethodDef methods[] = {
    {"install", install, METH_NOARGS,
     "Installs the reusing handler for the current context; returns the one it replaced."},
    {"restore", restore, METH_O, "Installs the handler install() returned."},
    {"set_limit", set_limit, METH_O, "Bytes of freed buffers kept at most (frees the rest)."},
    {"release", release, METH_NOARGS, "Frees every kept buffer; returns the bytes freed."},
    {"stats", stats, METH_NOARGS, "(idle bytes, limit, hits, misses)."},
    {NULL, NULL, 0, NULL}};

CDC_SINK_PLAIN_MODULE(_npcache, "numpy buffers kept for reuse (cdc_sink.runtime.numpy_pool).")
