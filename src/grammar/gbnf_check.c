/* gbnf_check.c: the GBNF compiler's (gbnf.c) checks of the parsed rules:
 * every rule is defined, and none is left recursive (which would make the
 * matcher expand forever). Nullable rules are found through a worklist,
 * left recursion through a depth-first walk on an explicit stack: both
 * O(elements), with no C recursion. */
#include <stdlib.h>

#include "common.h"
#include "grammar/gbnf_internal.h"

/* ---- checks ---- */

/* Where each rule is mentioned, for the nullable worklist: alternative a
 * (of rule owner[a]) has need[a] elements not yet known nullable; the
 * mentions of rule t are the alternatives by[off[t] .. off[t+1]) (one
 * entry per mention: an alternative mentioning t twice needs it twice). */
typedef struct {
    int32_t *need, *owner, *off, *by;
} mentions;

static void mentions_free(mentions *m) { free(m->need), free(m->owner), free(m->off), free(m->by); }

/* Counting sort of the references by the rule they name: O(elements). */
static bool mentions_make(parser *ps, mentions *m) {
    int32_t n_alt = 0, n_ref = 0;
    for (int32_t r = 0; r < ps->n_rules; r++)
        for (int32_t i = 0; i < ps->rules[r]->body.n; i++) {
            n_alt += ps->rules[r]->body.e[i].type == E_END;
            n_ref += ps->rules[r]->body.e[i].type == E_REF;
        }
    m->need = malloc((size_t)SP_MAX(n_alt, 1) * sizeof(int32_t));
    m->owner = malloc((size_t)SP_MAX(n_alt, 1) * sizeof(int32_t));
    m->off = calloc((size_t)ps->n_rules + 2, sizeof(int32_t));
    m->by = malloc((size_t)SP_MAX(n_ref, 1) * sizeof(int32_t));
    if (!m->need || !m->owner || !m->off || !m->by) return false;
    for (int32_t r = 0; r < ps->n_rules; r++) /* off[t + 2]: t's mentions, then their start */
        for (int32_t i = 0; i < ps->rules[r]->body.n; i++)
            if (ps->rules[r]->body.e[i].type == E_REF) m->off[ps->rules[r]->body.e[i].arg + 2]++;
    for (int32_t r = 0; r < ps->n_rules; r++) m->off[r + 2] += m->off[r + 1];
    int32_t a = 0, n = 0;
    for (int32_t r = 0; r < ps->n_rules; r++) /* placing t's mentions moves off[t + 1] to their end */
        for (int32_t i = 0; i < ps->rules[r]->body.n; i++) {
            const gr_elem x = ps->rules[r]->body.e[i];
            if (x.type == E_REF) m->by[m->off[x.arg + 1]++] = a;
            if (x.type != E_END) {
                n++;
                continue;
            }
            m->owner[a] = r, m->need[a++] = n, n = 0;
        }
    return true;
}

/* Nullable rules (those that can match the empty string), by the linear
 * worklist algorithm: a rule found nullable decrements the need of every
 * alternative that mentions it, and a need reaching 0 makes that
 * alternative's rule nullable (a byte set is never nullable: its count
 * stays). Each mention is visited once: O(elements), where passes over all
 * rules until nothing changes would be O(rules * elements). False when out
 * of memory. */
static bool find_nullable(parser *ps, bool *nullable) {
    mentions m = {0};
    int32_t *queue = malloc((size_t)ps->n_rules * sizeof(int32_t));
    const bool ok = queue && mentions_make(ps, &m);
    int32_t n_queue = 0;
    for (int32_t a = 0, r = 0; ok && r < ps->n_rules; r++) /* the rules with an empty alternative */
        for (int32_t i = 0; i < ps->rules[r]->body.n; i++)
            if (ps->rules[r]->body.e[i].type == E_END && !m.need[a++] && !nullable[r])
                nullable[r] = true, queue[n_queue++] = r;
    for (int32_t q = 0; ok && q < n_queue; q++) {
        const int32_t t = queue[q];
        for (int32_t k = m.off[t]; k < m.off[t + 1]; k++) {
            const int32_t a = m.by[k], r = m.owner[a];
            if (--m.need[a] == 0 && !nullable[r]) nullable[r] = true, queue[n_queue++] = r;
        }
    }
    mentions_free(&m);
    free(queue);
    return ok;
}

/* A depth-first walk's place in one rule: the next element to look at,
 * and whether everything before it in its alternative is nullable. */
typedef struct {
    int32_t r, i;
    bool at_start;
} walk;

/* The next rule that r's elements in first position (after nullable ones)
 * refer to and the walk has not met yet, from f's place on; -1: none left.
 * *cycle: a rule met that is still on the walk's path (left recursion). */
static int32_t next_first(parser *ps, walk *f, const bool *nullable, const uint8_t *state,
                          int32_t *cycle) {
    const evec *b = &ps->rules[f->r]->body;
    while (f->i < b->n) {
        const gr_elem x = b->e[f->i++];
        if (x.type == E_END) {
            f->at_start = true;
        } else if (f->at_start && x.type == E_BYTES) {
            f->at_start = false;
        } else if (f->at_start) {
            f->at_start = nullable[x.arg];
            if (state[x.arg] == 1) return *cycle = (int32_t)x.arg, -1;
            if (state[x.arg] == 0) return (int32_t)x.arg;
        }
    }
    return -1;
}

/* Left recursion: a rule reaching itself through references in first
 * position (after nullable ones); the rule, or -1. state: 0 unvisited, 1 on
 * the path, 2 done. The path lives in stack[] (n_rules places: a rule is
 * on it once), not in C frames: a chain of 60000 rules is 60000 deep. Each
 * element is looked at once over all the walks: O(elements). */
static int32_t left_cycle(parser *ps, int32_t root, const bool *nullable, uint8_t *state,
                          walk *stack) {
    if (state[root]) return -1;
    int32_t top = 0, cycle = -1;
    stack[0] = (walk){root, 0, true};
    state[root] = 1;
    while (top >= 0) {
        const int32_t next = next_first(ps, &stack[top], nullable, state, &cycle);
        if (cycle >= 0) return cycle;
        if (next < 0) {
            state[stack[top--].r] = 2;
            continue;
        }
        state[next] = 1;
        stack[++top] = (walk){next, 0, true};
    }
    return -1;
}

bool gb_check(parser *ps) {
    for (int32_t i = 0; i < ps->n_rules; i++)
        if (!ps->rules[i]->defined) {
            ps->p = ps->end;
            gb_perr(ps, "undefined rule '%.60s'", ps->rules[i]->name);
            return false;
        }
    bool *nullable = calloc((size_t)ps->n_rules, sizeof(bool));
    uint8_t *state = calloc((size_t)ps->n_rules, 1);
    walk *stack = malloc((size_t)ps->n_rules * sizeof(walk));
    if (!nullable || !state || !stack || !find_nullable(ps, nullable)) {
        free(nullable), free(state), free(stack);
        gb_perr(ps, "out of memory%s", NULL);
        return false;
    }
    int32_t bad = -1;
    for (int32_t r = 0; r < ps->n_rules && bad < 0; r++) bad = left_cycle(ps, r, nullable, state, stack);
    free(nullable), free(state), free(stack);
    if (bad >= 0) {
        ps->p = ps->end;
        ps->left_recursive = true;
        /* name the nearest named rule: generated ones are anonymous */
        gb_perr(ps, "left recursion: rule '%.60s' can reach itself without consuming input",
                ps->rules[bad]->name ? ps->rules[bad]->name : "(a group or repetition)");
        return false;
    }
    return true;
}
