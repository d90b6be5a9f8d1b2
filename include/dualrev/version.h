/* dualrev: the version of these headers (meson.build checks it against the
 * project's version).  ad_version() gives the version of the library that
 * was linked, which may differ from the headers'. */
#ifndef DUALREV_VERSION_H
#define DUALREV_VERSION_H

#define DUALREV_VERSION_MAJOR 0
#define DUALREV_VERSION_MINOR 2
#define DUALREV_VERSION_PATCH 0
#define DUALREV_VERSION_STRING "0.2.0"

/* One number that grows with every release: 10000 major + 100 minor + patch. */
#define DUALREV_VERSION_NUMBER                                                     \
    (DUALREV_VERSION_MAJOR * 10000 + DUALREV_VERSION_MINOR * 100 + DUALREV_VERSION_PATCH)

#endif
