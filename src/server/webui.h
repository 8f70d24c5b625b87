/* webui.h: the web page (GET /) and the live dashboard (GET /dashboard),
 * plain HTML, CSS and JavaScript compiled into the binary (webui.c,
 * src/server/webui/). The pages are static and public; what they read and
 * do goes through the API (/v1/..., /metrics) with the key the user types
 * into the page, so they add no access of their own. `--no-webui` turns
 * them off (404 like any unknown path). */
#ifndef SP_SERVER_WEBUI_H
#define SP_SERVER_WEBUI_H

#include <microhttpd.h>
#include <stdbool.h>

/* Whether url is one of the web UI's paths: "/", "/dashboard", "/webui/...". */
bool webui_path(const char *url);
/* Queues the answer for url (a webui_path): the asset for GET and HEAD
 * (200; 404 for an unknown /webui/ file), 405 otherwise; *code is the status. */
enum MHD_Result webui_answer(struct MHD_Connection *c, const char *url, const char *method,
                             int *code);

#endif
