/* A table of pending operations by MPI request handle, for the trace's messages
 * (wrappers.c) and compression's frames (compress.c), each with its own entry type.
 *
 * REQMAP(name, type) defines, for a `type` whose first member is `uint64_t key` (0:
 * free slot):
 *   static void name_put(MPI_Request r, type *e)    -- stores e under r (replacing)
 *   static int  name_swap(MPI_Request r, type *e, type *old)
 *                                                   -- as put; 1 and the replaced entry in
 *                                                      *old if r had one
 *   static int  name_find(MPI_Request r, type *out, int keep)
 *                                                   -- copies r's entry; removes it unless keep
 * Open addressing with linear probing and deletion by backward shift, so a lookup
 * touches a few adjacent slots; a lock per table, as MPI calls may come from any
 * thread: a spin lock, since it is held for a few dozen instructions on the path of
 * every traced message, where a mutex's lock and unlock cost more than the rest. A
 * handle MPI reuses after completion replaces the entry it had. Entries are stored by
 * value, so the tracing path allocates nothing per message. */

#ifndef VARGR_MPI_REQMAP_H
#define VARGR_MPI_REQMAP_H

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

static inline void reqmap_lock(int *l) {
    while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE)) {
        /* The holder may have been preempted (ranks can outnumber cores). */
        while (__atomic_load_n(l, __ATOMIC_RELAXED)) {
            sched_yield();
        }
    }
}

static inline void reqmap_unlock(int *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

static inline uint64_t reqmap_key(MPI_Request r) {
    uint64_t k = 0;
    memcpy(&k, &r, sizeof r < sizeof k ? sizeof r : sizeof k);
    return k;
}

#define REQMAP(name, type)                                                                      \
    static type *name##_slots;                                                                  \
    static size_t name##_cap, name##_used;                                                      \
    static int name##_lock;                                                                     \
                                                                                                \
    static size_t name##_home(uint64_t k) {                                                     \
        return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & (name##_cap - 1);                  \
    }                                                                                           \
                                                                                                \
    static int name##_put_locked(const type *e, type *replaced) {                               \
        if (2 * (name##_used + 1) > name##_cap) {                                               \
            size_t old = name##_cap;                                                            \
            type *was = name##_slots;                                                           \
            size_t ncap = name##_cap ? 2 * name##_cap : 256;                                    \
            type *t = calloc(ncap, sizeof *t);                                                  \
            if (t == NULL) {                                                                    \
                fprintf(stderr, "vargr-mpi: out of memory for pending requests\n");             \
                PMPI_Abort(MPI_COMM_WORLD, 1);                                                  \
                return 0;                                                                       \
            }                                                                                   \
            name##_slots = t;                                                                   \
            name##_cap = ncap;                                                                  \
            name##_used = 0;                                                                    \
            for (size_t i = 0; i < old; i++) {                                                  \
                if (was[i].key) {                                                               \
                    name##_put_locked(&was[i], NULL);                                           \
                }                                                                               \
            }                                                                                   \
            free(was);                                                                          \
        }                                                                                       \
        size_t i = name##_home(e->key);                                                         \
        while (name##_slots[i].key && name##_slots[i].key != e->key) {                          \
            i = (i + 1) & (name##_cap - 1);                                                     \
        }                                                                                       \
        int found = name##_slots[i].key != 0;                                                   \
        if (!found) {                                                                           \
            name##_used++;                                                                      \
        } else if (replaced) {                                                                  \
            *replaced = name##_slots[i];                                                        \
        }                                                                                       \
        name##_slots[i] = *e;                                                                   \
        return found;                                                                           \
    }                                                                                           \
                                                                                                \
    __attribute__((unused)) static int name##_swap(MPI_Request r, type *e, type *old) {         \
        e->key = reqmap_key(r);                                                                 \
        if (e->key == 0 || r == MPI_REQUEST_NULL) {                                             \
            return 0;                                                                           \
        }                                                                                       \
        reqmap_lock(&name##_lock);                                                              \
        int found = name##_put_locked(e, old);                                                  \
        reqmap_unlock(&name##_lock);                                                            \
        return found;                                                                           \
    }                                                                                           \
                                                                                                \
    __attribute__((unused)) static void name##_put(MPI_Request r, type *e) {                    \
        name##_swap(r, e, NULL);                                                                \
    }                                                                                           \
                                                                                                \
    __attribute__((unused)) static int name##_find(MPI_Request r, type *out, int keep) {        \
        uint64_t k = reqmap_key(r);                                                             \
        int found = 0;                                                                          \
        if (k == 0 || r == MPI_REQUEST_NULL) {                                                  \
            return 0;                                                                           \
        }                                                                                       \
        reqmap_lock(&name##_lock);                                                              \
        if (name##_cap) {                                                                       \
            size_t i = name##_home(k);                                                          \
            while (name##_slots[i].key && name##_slots[i].key != k) {                           \
                i = (i + 1) & (name##_cap - 1);                                                 \
            }                                                                                   \
            if (name##_slots[i].key == k) {                                                     \
                found = 1;                                                                      \
                *out = name##_slots[i];                                                         \
                if (!keep) {                                                                    \
                    name##_slots[i].key = 0;                                                    \
                    name##_used--;                                                              \
                    size_t j = i;                                                               \
                    for (;;) {                                                                  \
                        j = (j + 1) & (name##_cap - 1);                                         \
                        if (!name##_slots[j].key) {                                             \
                            break;                                                              \
                        }                                                                       \
                        size_t h = name##_home(name##_slots[j].key);                            \
                        /* j moves back to the hole at i unless its home is in (i, j]. */      \
                        int between = i <= j ? (h > i && h <= j) : (h > i || h <= j);           \
                        if (!between) {                                                         \
                            name##_slots[i] = name##_slots[j];                                  \
                            name##_slots[j].key = 0;                                            \
                            i = j;                                                              \
                        }                                                                       \
                    }                                                                           \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
        reqmap_unlock(&name##_lock);                                                            \
        return found;                                                                           \
    }

#endif
