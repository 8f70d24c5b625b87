/* status.c: the names of sp_status values and finish reasons (specula.h),
 * apart from the engine so that code that only reports them (the
 * server's JSON, its fuzz targets) needs nothing else of it. */
#include "specula.h"

const char *sp_status_str(int status) {
    switch (status) {
    case SP_OK: return "ok";
    case SP_ERR_INVALID: return "invalid";
    case SP_ERR_CONTEXT: return "context";
    case SP_ERR_NOMEM: return "nomem";
    case SP_ERR_BUSY: return "busy";
    case SP_ERR_CANCELLED: return "cancelled";
    case SP_ERR_UNSUPPORTED: return "unsupported";
    case SP_ERR_IO: return "io";
    case SP_ERR_NOT_FOUND: return "not_found";
    case SP_ERR_INTERNAL: return "internal";
    case SP_ERR_GRAMMAR: return "grammar";
    default: return "unknown";
    }
}

const char *sp_finish_reason_str(sp_finish_reason r) {
    switch (r) {
    case SP_FINISH_STOP: return "stop";
    case SP_FINISH_LENGTH: return "length";
    case SP_FINISH_CANCELLED: return "cancelled";
    case SP_FINISH_ERROR: return "error";
    default: return "none";
    }
}
