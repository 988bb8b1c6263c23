/* dash_assets.h - the dashboard's page, script and style sheet, built into brambled
 * from coordinator/web/ (cmake/embed.cmake writes dash_assets.c at build time; it
 * is never committed). Nothing is fetched from elsewhere: no CDN, no vendored code. */
#ifndef BRAMBLE_DASH_ASSETS_H
#define BRAMBLE_DASH_ASSETS_H

#include <stddef.h>

typedef struct {
    const char *path;          /* "/index.html", "/app.js" (served as /static/app.js) */
    const char *type;          /* Content-Type */
    const unsigned char *data; /* len bytes and a NUL */
    size_t len;
} br_dash_asset_t;

/* Ends with an entry whose path is NULL. */
extern const br_dash_asset_t br_dash_assets[];

#endif
