/* webui.c: serves the web page and the dashboard (see webui.h). The assets
 * in src/server/webui/ are embedded with the assembler's .incbin (paths
 * relative to the repository root, where make runs); mk/webui.mk makes this
 * object depend on them, so an edit to an asset rebuilds it. */
#include "server/webui.h"

#include <string.h>

/* name[] .. name_end: the file's bytes (a NUL follows, not counted). */
#define WEBUI_ASSET(name, file)                                                              \
    __asm__(".section .rodata\n"                                                            \
            ".global " #name "\n.hidden " #name "\n.balign 16\n" #name ":\n"                \
            ".incbin \"" file "\"\n"                                                        \
            ".global " #name "_end\n.hidden " #name "_end\n" #name "_end:\n"                 \
            ".byte 0\n.previous\n");                                                        \
    extern const char name[], name##_end[]

WEBUI_ASSET(webui_index_html, "src/server/webui/index.html");
WEBUI_ASSET(webui_dashboard_html, "src/server/webui/dashboard.html");
WEBUI_ASSET(webui_style_css, "src/server/webui/style.css");
WEBUI_ASSET(webui_common_js, "src/server/webui/common.js");
WEBUI_ASSET(webui_app_js, "src/server/webui/app.js");
WEBUI_ASSET(webui_dash_js, "src/server/webui/dash.js");
WEBUI_ASSET(webui_icon_svg, "src/server/webui/icon.svg");

typedef struct {
    const char *url, *type, *start, *end;
} asset;

static const asset assets[] = {
    {"/", "text/html; charset=utf-8", webui_index_html, webui_index_html_end},
    {"/dashboard", "text/html; charset=utf-8", webui_dashboard_html,
     webui_dashboard_html_end},
    {"/webui/style.css", "text/css; charset=utf-8", webui_style_css, webui_style_css_end},
    {"/webui/common.js", "text/javascript; charset=utf-8", webui_common_js,
     webui_common_js_end},
    {"/webui/app.js", "text/javascript; charset=utf-8", webui_app_js, webui_app_js_end},
    {"/webui/dash.js", "text/javascript; charset=utf-8", webui_dash_js, webui_dash_js_end},
    {"/webui/icon.svg", "image/svg+xml", webui_icon_svg, webui_icon_svg_end},
};

/* No inline script or style, nothing from elsewhere; the API and /metrics
 * are same-origin fetches (connect-src 'self'). */
static const char csp[] = "default-src 'self'; script-src 'self'; style-src 'self'; "
                          "img-src 'self'; connect-src 'self'; object-src 'none'; "
                          "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

bool webui_path(const char *url) {
    return !strcmp(url, "/") || !strcmp(url, "/dashboard") || !strncmp(url, "/webui/", 7);
}

static enum MHD_Result answer(struct MHD_Connection *c, int code, const char *type,
                              const char *body, size_t len) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", type);
    MHD_add_response_header(resp, "Content-Security-Policy", csp);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    if (code == 405) MHD_add_response_header(resp, "Allow", "GET, HEAD");
    enum MHD_Result r = MHD_queue_response(c, (unsigned)code, resp);
    MHD_destroy_response(resp);
    return r;
}

enum MHD_Result webui_answer(struct MHD_Connection *c, const char *url, const char *method,
                             int *code) {
    static const char not_found[] = "not found\n", bad_method[] = "use GET\n";
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        *code = 405;
        return answer(c, 405, "text/plain; charset=utf-8", bad_method, sizeof(bad_method) - 1);
    }
    for (size_t i = 0; i < sizeof(assets) / sizeof(assets[0]); i++)
        if (!strcmp(url, assets[i].url)) {
            *code = 200;
            return answer(c, 200, assets[i].type, assets[i].start,
                          (size_t)(assets[i].end - assets[i].start));
        }
    *code = 404;
    return answer(c, 404, "text/plain; charset=utf-8", not_found, sizeof(not_found) - 1);
}
