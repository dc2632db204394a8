/* A volley client in C: connects to an arena server, steers its avatar in a circle, decodes
 * the snapshots and reads the arena's reliable messages, through volley-ffi.
 *
 *   cargo build -p volley-ffi
 *   cc examples/c/client.c -Iffi/include -Ltarget/debug -lvolley_ffi -Wl,-rpath,target/debug -o client
 *   volley schema > arena.json
 *   volley token --private-key KEY --client-id 1 --server 127.0.0.1:40000 --out token.bin
 *   ./client token.bin arena.json 5 [snapshots.txt]
 *
 * It plays SECONDS seconds at 60 frames a second. For each new snapshot it writes the
 * avatars exactly as that snapshot holds them ("tick T" and a line per avatar: id, then its
 * numbers field by field) to the fourth argument's file, if given. It predicts its own
 * avatar (each input applied at once, reconciled with every snapshot: see `Prediction`) and
 * prints how often reconciling corrected it. It exits 0 when it was connected, decoded
 * snapshots, predicted, and was welcomed by the arena; 1 otherwise. */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "volley.h"

#define MAX_AVATARS 256
#define TAU 6.283185307179586

/* Reads a whole file into a new buffer (NUL-terminated); its length into *len. */
static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        *len = (size_t)n;
    }
    return buf;
}

static void fail(const char *what, int32_t code) {
    char message[512];
    volley_last_error(message, sizeof message);
    fprintf(stderr, "%s: error %d: %s\n", what, code, message);
}

/* The arena's input, as postcard writes its ArenaInput: move_x and move_y one byte each
 * (two's complement), aim as a varint (a 65536th of a turn), fire and rail one byte each. */
static size_t arena_input(unsigned char *out, int move_x, int move_y, unsigned aim, int fire) {
    size_t n = 0;
    out[n++] = (unsigned char)(signed char)move_x;
    out[n++] = (unsigned char)(signed char)move_y;
    do {
        unsigned char b = aim & 0x7f;
        aim >>= 7;
        out[n++] = aim ? (b | 0x80) : b;
    } while (aim);
    out[n++] = (unsigned char)fire;
    out[n++] = 0;
    return n;
}

/* Prediction of the own avatar. The arena moves an avatar by its newest input each tick
 * (SPEED metres a second, inside the walls); this client sends one input a frame, about one a
 * tick, so it predicts by applying each input at once. With each new snapshot it reconciles:
 * the snapshot's position of its own entity (volley_client_own_entity) with every input the
 * server had not yet applied (volley_client_applied_input) replayed on it. What that moves
 * the prediction by is a correction. */
#define SPEED 8.0
#define HALF_SIZE 50.0
#define HISTORY 128

typedef struct {
    uint32_t seq[HISTORY];
    double dx[HISTORY], dy[HISTORY];
    double x, y;      /* the prediction */
    int have;         /* a snapshot has been reconciled */
    long reconciled, corrections;
    double corrected; /* the corrections' sum, metres */
} Prediction;

static double clamp(double v) {
    double lim = HALF_SIZE - 0.5;
    return v < -lim ? -lim : v > lim ? lim : v;
}

/* One input applied as the arena applies it for a tick. */
static void step(double *x, double *y, double dx, double dy) {
    *x = clamp(*x + dx * SPEED / 60.0);
    *y = clamp(*y + dy * SPEED / 60.0);
}

/* An input just sent (its sequence number from volley_client_input_seq). */
static void predict_sent(Prediction *p, uint32_t seq, int move_x, int move_y) {
    double dx = move_x / 127.0, dy = move_y / 127.0, len = sqrt(dx * dx + dy * dy);
    if (len > 1.0) {
        dx /= len;
        dy /= len;
    }
    p->seq[seq % HISTORY] = seq;
    p->dx[seq % HISTORY] = dx;
    p->dy[seq % HISTORY] = dy;
    if (p->have) step(&p->x, &p->y, dx, dy);
}

/* A new snapshot: the own avatar at (x, y) in it, the server having applied our inputs up to
 * `applied` (if `has_applied`), our newest input `newest`. */
static void predict_reconcile(Prediction *p, double x, double y, int has_applied, uint32_t applied, uint32_t newest) {
    uint32_t from = has_applied ? applied + 1 : newest - HISTORY + 1;
    for (uint32_t s = from; (int32_t)(newest - s) >= 0; s++) {
        if (p->seq[s % HISTORY] == s) step(&x, &y, p->dx[s % HISTORY], p->dy[s % HISTORY]);
    }
    if (p->have) {
        double e = sqrt((x - p->x) * (x - p->x) + (y - p->y) * (y - p->y));
        p->corrected += e;
        if (e > 0.01) p->corrections++;
    }
    p->x = x;
    p->y = y;
    p->have = 1;
    p->reconciled++;
}

/* Reads a varint from the message; 0 when it is cut short. */
static int varint(const unsigned char *m, size_t len, size_t *at, uint32_t *v) {
    *v = 0;
    for (int shift = 0; *at < len && shift < 35; shift += 7) {
        unsigned char b = m[(*at)++];
        *v |= (uint32_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s TOKEN_FILE SCHEMA_FILE SECONDS [SNAPSHOTS_OUT]\n", argv[0]);
        return 2;
    }
    size_t token_len = 0, schema_len = 0;
    unsigned char *token = slurp(argv[1], &token_len);
    unsigned char *schema = slurp(argv[2], &schema_len);
    if (!token || !schema) {
        fprintf(stderr, "cannot read %s or %s\n", argv[1], argv[2]);
        free(token);
        free(schema);
        return 2;
    }
    FILE *out = argc > 4 ? fopen(argv[4], "w") : NULL;
    int seconds = atoi(argv[3]);

    uint64_t client = 0;
    int32_t rc = volley_client_new(token, token_len, (const char *)schema, NULL, &client);
    free(token);
    free(schema);
    if (rc != VOLLEY_OK) {
        fail("volley_client_new", rc);
        if (out) fclose(out);
        return 1;
    }
    uint16_t avatar = 0;
    uint32_t per = 0;
    if ((rc = volley_client_kind(client, "Avatar", &avatar, &per)) != VOLLEY_OK || per == 0 || per > 16) {
        fail("volley_client_kind", rc);
        volley_client_free(client);
        if (out) fclose(out);
        return 1;
    }

    uint32_t ids[MAX_AVATARS];
    double values[MAX_AVATARS * 16];
    unsigned char message[1024];
    int connected = 0, welcomed = 0, snapshots = 0, drawn = 0;
    uint32_t me = 0, last_tick = 0;
    int have_tick = 0;
    struct timespec frame = {0, 16666667}, cpu0, cpu1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0);
    int frames = 0;
    Prediction me_predicted;
    memset(&me_predicted, 0, sizeof me_predicted);
    uint32_t me_before_rebind = 0, me_after = 0;
    int resuming_frames = 0; /* frames the library said it was resuming (the game's "reconnecting…") */
    for (int f = 0; f < seconds * 60; f++) {
        frames++;
        /* Half way: the socket moves to a new port, as a NAT rebinding moves a player. Untold,
           the library hears a second of silence and resumes the session with its ticket. */
        if (f == seconds * 30 && connected) {
            me_before_rebind = me;
            rc = volley_client_rebind(client, 0);
            if (rc < 0) fail("volley_client_rebind", rc);
        }
        /* Steer in a circle, aim the way we go, fire now and then. */
        double a = f * 0.05;
        unsigned char input[16];
        int move_x = (int)(cos(a) * 127), move_y = (int)(sin(a) * 127);
        size_t n = arena_input(input, move_x, move_y, (unsigned)(fmod(a / TAU, 1.0) * 65536) & 0xffff, f % 30 == 0);
        uint32_t before = 0, seq = 0;
        int had = volley_client_input_seq(client, &before);
        rc = volley_client_poll(client, input, n);
        if (rc < 0) {
            fail("volley_client_poll", rc);
            break;
        }
        snapshots += rc;
        /* The input went out (once connected): predicted at once. */
        if (volley_client_input_seq(client, &seq) == 1 && (!had || seq != before)) {
            predict_sent(&me_predicted, seq, move_x, move_y);
        }
        int status = volley_client_status(client);
        if (status == VOLLEY_CONNECTED && !connected) {
            connected = 1;
            volley_client_index(client, &me);
            printf("connected as player %u\n", me);
        }
        if (status == VOLLEY_RESUMING) resuming_frames++;
        if (status == VOLLEY_ENDED) {
            char why[256];
            volley_client_end_reason(client, why, sizeof why);
            printf("ended: %s\n", why);
            break;
        }
        /* The arena's messages: 1 = welcome (player id), 0 = a kill (seq, killer, victim). */
        size_t len = 0;
        bool reliable = false;
        while ((rc = volley_client_next_message(client, message, sizeof message, &len, &reliable)) == 1) {
            size_t at = 0;
            uint32_t variant = 0, player = 0;
            if (varint(message, len, &at, &variant) && variant == 1 && varint(message, len, &at, &player)) {
                printf("welcome: player %u (reliable %d)\n", player, reliable);
                welcomed = reliable && player == me;
            }
        }
        if (rc < 0) fail("volley_client_next_message", rc);
        /* Each new snapshot, as it holds the avatars. */
        uint32_t tick = 0;
        if (volley_client_latest_tick(client, &tick) == 1 && (!have_tick || tick != last_tick)) {
            have_tick = 1;
            last_tick = tick;
            size_t count = 0;
            rc = volley_client_snapshot_entities(client, tick, avatar, ids, values, MAX_AVATARS, &count);
            uint32_t own = 0, applied = 0;
            if (rc == 1 && volley_client_own_entity(client, &own) == 1 && volley_client_input_seq(client, &seq) == 1) {
                int has_applied = volley_client_applied_input(client, tick, &applied) == 1;
                for (size_t i = 0; i < count; i++) {
                    if (ids[i] == own) predict_reconcile(&me_predicted, values[i * per], values[i * per + 1], has_applied, applied, seq);
                }
            }
            if (rc == 1 && out) {
                fprintf(out, "tick %u\n", tick);
                for (size_t i = 0; i < count; i++) {
                    fprintf(out, "%u", ids[i]);
                    for (uint32_t v = 0; v < per; v++) fprintf(out, " %.17g", values[i * per + v]);
                    fprintf(out, "\n");
                }
            } else if (rc < 0) {
                fail("volley_client_snapshot_entities", rc);
            }
        }
        /* What a game would draw this frame: every avatar, blended between snapshots. */
        size_t count = 0;
        rc = volley_client_entities(client, avatar, ids, values, MAX_AVATARS, &count);
        if (rc == VOLLEY_OK) {
            for (size_t i = 0; i < count; i++) {
                if (ids[i] == me && f % 60 == 0) printf("me at %.2f %.2f\n", values[i * per], values[i * per + 1]);
            }
            drawn += count > 0;
        } else {
            fail("volley_client_entities", rc);
        }
        nanosleep(&frame, NULL);
    }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
    double cpu_us = (cpu1.tv_sec - cpu0.tv_sec) * 1e6 + (cpu1.tv_nsec - cpu0.tv_nsec) / 1e3;
    printf("cpu per frame %.1f us over %d frames\n", cpu_us / frames, frames);
    uint32_t resumes = 0;
    volley_client_resumes(client, &resumes);
    volley_client_index(client, &me_after);
    printf("resumes %u, player %u before the rebind and %u after, %d frames resuming\n", resumes, me_before_rebind,
           me_after, resuming_frames);
    VolleyStats stats;
    volley_client_stats(client, &stats);
    printf("snapshots %d (decoded %llu, errors %llu), frames drawn %d, rtt %.2f ms\n", snapshots,
           (unsigned long long)stats.snapshots, (unsigned long long)stats.snapshot_errors, drawn, stats.rtt_ms);
    printf("prediction: %ld reconciled, %ld corrections, mean %.4f m; jitter %.2f ms, render delay %.1f ms\n",
           me_predicted.reconciled, me_predicted.corrections,
           me_predicted.reconciled ? me_predicted.corrected / me_predicted.reconciled : 0.0, stats.jitter_ms,
           stats.render_delay_ms);
    volley_client_free(client);
    /* A freed handle is refused, not followed. */
    if (volley_client_status(client) != VOLLEY_ERR_HANDLE) {
        printf("a freed handle was not refused\n");
        return 1;
    }
    if (out) fclose(out);
    int ok = connected && snapshots >= 30 && welcomed && drawn > 0 && me_predicted.reconciled >= 30;
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
