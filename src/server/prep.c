/* prep.c: the server's preparation thread, for generation requests whose
 * preparation costs more than a parse: those with a grammar (GBNF,
 * response_format, tools). Their grammar is compiled and its first mask
 * checked at submission (the engine's eng_grammar_take), within budgets but up to
 * tens of milliseconds for the largest; on an HTTP event loop that would
 * stall every connection the loop serves, /health included. So the event
 * loop hands such a request to this thread (prep_start) and suspends the
 * connection; the thread builds and submits it (gen_prepare) and resumes
 * the connection, which then answers as any other request: the stream, or
 * the 400 naming the grammar's problem (prep_answer).
 *
 * A job is shared by the connection and the thread (refs). The connection
 * may go (the client closes before the job ran): prep_detach clears job->c,
 * and whoever of the two comes last cancels and releases a request that was
 * submitted for nobody. When the server closes, the thread ends the jobs
 * still queued with a 503 and is joined before MHD stops, so no connection
 * stays suspended. */
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

struct prep_job {
    pthread_mutex_t mu;
    int refs;                      /* the connection's and the thread's */
    prep_job *next;                /* the queue */
    struct MHD_Connection *c;      /* NULL once the connection is gone */
    gen_prep g;                    /* the request, parsed; its result */
    bool done, suspended;
};

static void job_unref(prep_job *j) {
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    oai_req_free(&j->g.q);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* A request submitted for a connection that is gone: cancelled, and the
 * connection's reference let go. */
static void orphan(sreq *r) {
    if (!r) return;
    sreq_cancel(r, true);
    pthread_mutex_lock(&r->mu);
    r->c = NULL;
    pthread_mutex_unlock(&r->mu);
    sreq_unref(r);
}

/* The job is done: its connection resumed, or, when the connection is
 * gone, its request orphaned. */
static void finish(prep_job *j) {
    pthread_mutex_lock(&j->mu);
    j->done = true;
    sreq *lost = NULL;
    if (!j->c) {
        lost = j->g.r;
        j->g.r = NULL;
    } else if (j->suspended) {
        j->suspended = false;
        MHD_resume_connection(j->c);
    }
    pthread_mutex_unlock(&j->mu);
    orphan(lost);
}

static void *prep_main(void *arg) {
    http_server *s = arg;
    pthread_mutex_lock(&s->prep_mu);
    for (;;) {
        while (!s->prep_head && !s->prep_quit) pthread_cond_wait(&s->prep_cv, &s->prep_mu);
        prep_job *j = s->prep_head;
        if (!j) break;
        s->prep_head = j->next;
        const bool quit = s->prep_quit;
        pthread_mutex_unlock(&s->prep_mu);
        if (quit) /* the server closes: what never started is refused */
            gen_prepare_refuse(s, &j->g, "the server is shutting down");
        else
            gen_prepare(s, &j->g);
        finish(j);
        job_unref(j);
        pthread_mutex_lock(&s->prep_mu);
    }
    pthread_mutex_unlock(&s->prep_mu);
    return NULL;
}

int prep_init(http_server *s) {
    if (pthread_create(&s->prep_thread, NULL, prep_main, s)) return -1;
    s->prep_started = true;
    return 0;
}

void prep_stop(http_server *s) {
    if (!s->prep_started) return;
    pthread_mutex_lock(&s->prep_mu);
    s->prep_quit = 1;
    pthread_cond_signal(&s->prep_cv);
    pthread_mutex_unlock(&s->prep_mu);
    pthread_join(s->prep_thread, NULL);
    s->prep_started = false;
}

void prep_destroy(http_server *s) {
    pthread_mutex_destroy(&s->prep_mu);
    pthread_cond_destroy(&s->prep_cv);
}

int prep_start(http_server *s, struct MHD_Connection *c, conn *cx, const gen_prep *g) {
    prep_job *j = calloc(1, sizeof(*j));
    if (!j) return -1;
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 2;
    j->c = c;
    j->g = *g; /* the request's fields move to the job */
    pthread_mutex_lock(&s->prep_mu);
    const bool open = !s->prep_quit && s->prep_started;
    if (open) {
        prep_job **t = &s->prep_head;
        while (*t) t = &(*t)->next;
        *t = j;
        pthread_cond_signal(&s->prep_cv);
    }
    pthread_mutex_unlock(&s->prep_mu);
    if (!open) {
        memset(&j->g.q, 0, sizeof(j->g.q)); /* still the caller's to free */
        j->refs = 1;
        job_unref(j);
        return -1;
    }
    cx->job = j;
    s->open_resps++;
    return 0;
}

enum MHD_Result prep_answer(http_server *s, struct MHD_Connection *c, const char *url, conn *cx) {
    prep_job *j = cx->job;
    pthread_mutex_lock(&j->mu);
    if (!j->done && !s->closing) { /* wait: finish() resumes the connection */
        j->suspended = true;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&j->mu);
        return MHD_YES;
    }
    oai_error e;
    sreq *r = NULL;
    if (j->done) { /* the thread is through with j->g */
        r = j->g.r;
        j->g.r = NULL;
        e = j->g.e;
    } else { /* closing before the job ran: the thread orphans its request */
        j->c = NULL;
        oai_seterr(&e, 503, "service_unavailable", NULL, "shutting_down",
                   "the server is shutting down");
    }
    pthread_mutex_unlock(&j->mu);
    cx->job = NULL;
    job_unref(j);
    if (!r) {
        s->open_resps--;
        return gen_fail(s, c, url, cx, &e);
    }
    return gen_attach(s, c, url, cx, r);
}

void prep_detach(http_server *s, conn *cx) {
    prep_job *j = cx->job;
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    j->c = NULL;
    sreq *lost = j->done ? j->g.r : NULL;
    if (lost) j->g.r = NULL;
    pthread_mutex_unlock(&j->mu);
    orphan(lost);
    cx->job = NULL;
    s->open_resps--;
    job_unref(j);
}
