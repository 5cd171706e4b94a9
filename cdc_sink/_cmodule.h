/*
 * The module definition shared by cdc_sink's C extensions that have no state and no
 * set-up of their own (runtime/_npcache, storage/_cbytesplit, tablet/_cslots).
 *
 * CDC_SINK_PLAIN_MODULE(name, doc) defines the module `name` (an identifier) whose
 * functions are the file's `methods` table, and its init function PyInit_<name>.
 */
#ifndef CDC_SINK_CMODULE_H
#define CDC_SINK_CMODULE_H

#include <Python.h>

#define CDC_SINK_PLAIN_MODULE(name, doc)                                                  \
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, #name, doc, -1, methods,   \
                                        NULL, NULL, NULL, NULL};                          \
    PyMODINIT_FUNC PyInit_##name(void) { return PyModule_Create(&module); }

#endif
