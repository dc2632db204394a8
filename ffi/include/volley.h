/* volley's client as a C library: generated from ffi/src/lib.rs by cbindgen (do not edit;
 * `VOLLEY_BLESS=1 cargo test -p volley-ffi --test it header` writes it again).
 *
 * Every function returns 0 or a count on success and a negative VOLLEY_ERR_* code on
 * failure (volley_last_error copies the message). A client is a uint64_t handle; a handle
 * never made or already freed is refused, never followed. The caller owns every buffer: the
 * library writes only into the arrays it is given, up to the capacity given, and allocates
 * nothing the caller must free except a client (volley_client_free). No panic crosses this
 * boundary. */

#ifndef VOLLEY_H
#define VOLLEY_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// Success (or: nothing to report).
#define VOLLEY_OK 0

// A pointer that must not be null was null.
#define VOLLEY_ERR_NULL -1

// No such client: never made, or freed already.
#define VOLLEY_ERR_HANDLE -2

// The schema JSON could not be read, or does not describe a schema volley can code.
#define VOLLEY_ERR_SCHEMA -3

// The connect token could not be read (it must be the 2048 bytes the backend or
// `volley token --out` gives).
#define VOLLEY_ERR_TOKEN -4

// A buffer passed was too small; the size needed was written where the call says.
#define VOLLEY_ERR_TOO_SMALL -5

// No such kind in the schema.
#define VOLLEY_ERR_KIND -6

// Not possible in the client's state (a message before the session is established).
#define VOLLEY_ERR_STATE -7

// The socket could not be made (the message says why).
#define VOLLEY_ERR_IO -8

// A message was refused: too long, or too many waiting to be sent.
#define VOLLEY_ERR_MESSAGE -9

// A text argument was not UTF-8.
#define VOLLEY_ERR_UTF8 -10

// An internal fault was caught (a bug in volley): the client is closed.
#define VOLLEY_ERR_INTERNAL -11

// [`volley_client_status`]: connecting (or negotiating the session).
#define VOLLEY_CONNECTING 0

// [`volley_client_status`]: connected, snapshots flow.
#define VOLLEY_CONNECTED 1

// [`volley_client_status`]: the session ended ([`volley_client_end_reason`] says why).
#define VOLLEY_ENDED 2

// [`volley_client_status`]: the connection dropped (the server silent for a second, or the
// socket moved) and the client is resuming its session with its resume ticket, the same
// player; [`VOLLEY_CONNECTED`] again once it is back ([`volley_client_resumes`] counts), or
// [`VOLLEY_ENDED`] when the server's grace ran out.
#define VOLLEY_RESUMING 3

// [`volley_client_next_notice`]: the player connected and the server put it in its entry
// world.
#define VOLLEY_ENTERED_CONNECTED 0

// [`volley_client_next_notice`]: the game moved the player to this world.
#define VOLLEY_ENTERED_MOVED 1

// [`volley_client_next_notice`]: the world the player was in stopped, and this is its
// fallback.
#define VOLLEY_ENTERED_WORLD_STOPPED 2

// A client's figures, as [`volley_client_stats`] writes them.
typedef struct {
  // Smoothed round-trip time, milliseconds.
  double rtt_ms;
  // Packet loss seen by the server, 0 to 1.
  double loss;
  // Snapshots decoded.
  uint64_t snapshots;
  // Snapshots that could not be decoded.
  uint64_t snapshot_errors;
  // Bytes received.
  uint64_t bytes_received;
  // Frames drawn between two snapshots, and carried on past the newest.
  uint64_t frames_interpolated;
  // See `frames_interpolated`.
  uint64_t frames_extrapolated;
  // How far behind the server the picture is drawn, in ticks.
  double render_delay_ticks;
  // How much the round-trip time varies, milliseconds.
  double jitter_ms;
  // How far behind the server the picture is drawn, milliseconds (`render_delay_ticks`
  // at the session's tick rate; 0 before the session is agreed).
  double render_delay_ms;
} VolleyStats;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// Copies the message of this thread's last failure into `buf` (NUL-terminated, when
// `capacity` is enough) and returns the bytes it needs with the NUL (1: no failure yet).
//
// # Safety
// `buf` must be null or point to `capacity` writable bytes.
size_t volley_last_error(char *buf, size_t capacity);

// The volley protocol version this library speaks.
uint32_t volley_protocol_version(void);

// Makes a client from a connect token (`token_len` must be 2048: the bytes the backend
// or `volley token --out` gives) and the game's schema as JSON (NUL-terminated; `volley
// schema` prints it), bound to `bind` (NUL-terminated, e.g. `"0.0.0.0:0"`; null for that).
// It starts connecting at the first [`volley_client_poll`]. The handle goes to
// `*out_client`; free it with [`volley_client_free`].
//
// # Safety
// `token` must point to `token_len` bytes; `schema_json` and `bind` must be null or
// NUL-terminated; `out_client` must be null or writable.
int32_t volley_client_new(const uint8_t *token,
                          size_t token_len,
                          const char *schema_json,
                          const char *bind,
                          uint64_t *out_client);

// Frees a client, telling its server goodbye first when connected. The handle is refused
// from then on.
int32_t volley_client_free(uint64_t client);

// One frame: takes every datagram waiting, runs the client's timers and sends `input`
// (`input_len` bytes, at most 64: the game's own encoding) once connected. Returns how
// many new snapshots arrived (0 or more). The time is the system clock's; see
// [`volley_client_poll_at`] for the game's own.
//
// # Safety
// `input` must point to `input_len` bytes (or be null with `input_len` 0).
int32_t volley_client_poll(uint64_t client, const uint8_t *input, size_t input_len);

// [`volley_client_poll`] at `now_us`, the game's own time in microseconds (an engine's
// frame clock, a test's): any clock that never goes back, from any start. A client keeps
// to the clock its first call that takes the time chose: after an `_at` call, the calls
// on the system clock ([`volley_client_poll`], [`volley_client_poll_watching`],
// [`volley_client_entities`]) are refused with [`VOLLEY_ERR_STATE`], and the other way
// round; so is a time before the last one given.
//
// # Safety
// `input` must point to `input_len` bytes (or be null with `input_len` 0).
int32_t volley_client_poll_at(uint64_t client,
                              uint64_t now_us,
                              const uint8_t *input,
                              size_t input_len);

// [`volley_client_poll`] for a client that sends no input (a spectator).
int32_t volley_client_poll_watching(uint64_t client);

// [`volley_client_poll_watching`] at the game's own time (see [`volley_client_poll_at`]).
int32_t volley_client_poll_watching_at(uint64_t client, uint64_t now_us);

// Where the client is: [`VOLLEY_CONNECTING`], [`VOLLEY_CONNECTED`], [`VOLLEY_RESUMING`] or
// [`VOLLEY_ENDED`] (`GameClient::link_status`).
int32_t volley_client_status(uint64_t client);

// Why the session ended, as text ("kicked: camping", "the server is shutting down"), into
// `buf` (NUL-terminated when `capacity` is enough). Returns the bytes it needs with the
// NUL, or 0 while the session has not ended.
//
// # Safety
// `buf` must be null or point to `capacity` writable bytes.
int32_t volley_client_end_reason(uint64_t client, char *buf, size_t capacity);

// Looks a kind up by name: its id into `*out_kind` and the numbers each of its entities
// decodes to into `*out_values` (the schema JSON lists them field by field).
//
// # Safety
// `name` must be NUL-terminated; the outputs must be null or writable.
int32_t volley_client_kind(uint64_t client,
                           const char *name,
                           uint16_t *out_kind,
                           uint32_t *out_values);

// Every entity of `kind` as the player should see it now, blended between snapshots as the
// Rust client's `GameClient::entities` draws them: ids into `ids` (`capacity` of them),
// each one's numbers into `values` (`capacity` × the kind's values per entity, entity by
// entity, field by field). The count goes to `*out_count`; when it is over `capacity`,
// nothing is written but the count, and the call returns [`VOLLEY_ERR_TOO_SMALL`].
//
// # Safety
// `ids` must be null or hold `capacity` ids; `values` must be null or hold `capacity` ×
// values-per-entity doubles; `out_count` must be null or writable.
int32_t volley_client_entities(uint64_t client,
                               uint16_t kind,
                               uint32_t *ids,
                               double *values,
                               size_t capacity,
                               size_t *out_count);

// [`volley_client_entities`] at the game's own time (see [`volley_client_poll_at`]).
//
// # Safety
// As [`volley_client_entities`].
int32_t volley_client_entities_at(uint64_t client,
                                  uint16_t kind,
                                  uint64_t now_us,
                                  uint32_t *ids,
                                  double *values,
                                  size_t capacity,
                                  size_t *out_count);

// Sends the game a message (`len` bytes; reliable: arrives once and in order, else an
// event that may be lost), which the world reads in `World::message`.
//
// # Safety
// `data` must point to `len` bytes.
int32_t volley_client_send_message(uint64_t client, const uint8_t *data, size_t len, bool reliable);

// Takes the next message the game sent this client (reliable ones first, in order, then
// events) into `buf`: returns 1 and writes its length to `*out_len` and whether it came
// reliably to `*out_reliable`, or 0 when none waits. When `capacity` is too small the
// message stays, its length goes to `*out_len`, and the call returns
// [`VOLLEY_ERR_TOO_SMALL`].
//
// # Safety
// `buf` must be null or hold `capacity` bytes; the outputs must be null or writable.
int32_t volley_client_next_message(uint64_t client,
                                   uint8_t *buf,
                                   size_t capacity,
                                   size_t *out_len,
                                   bool *out_reliable);

// The world the player is in: its number into `*out_world` and its kind ("lobby",
// "match") into `kind` (NUL-terminated when `capacity` is enough). Returns the bytes the
// kind needs with the NUL, or 0 before the server has said.
//
// # Safety
// `out_world` must be null or writable; `kind` null or `capacity` writable bytes.
int32_t volley_client_world(uint64_t client, uint16_t *out_world, char *kind, size_t capacity);

// The client's figures into `*out`.
//
// # Safety
// `out` must be null or writable.
int32_t volley_client_stats(uint64_t client, VolleyStats *out);

// The tick of the newest snapshot decoded into `*out_tick`: returns 1, or 0 before the
// first.
//
// # Safety
// `out_tick` must be null or writable.
int32_t volley_client_latest_tick(uint64_t client, uint32_t *out_tick);

// The entities of `kind` exactly as the snapshot of `tick` holds them (no blending; the
// client keeps its last 64 snapshots), written as [`volley_client_entities`] writes them.
// Returns 1, or 0 when that snapshot is not held.
//
// # Safety
// As [`volley_client_entities`].
int32_t volley_client_snapshot_entities(uint64_t client,
                                        uint32_t tick,
                                        uint16_t kind,
                                        uint32_t *ids,
                                        double *values,
                                        size_t capacity,
                                        size_t *out_count);

// This client's slot on the server (also its player id in the world) into `*out_index`:
// returns 1, or 0 before it is connected.
//
// # Safety
// `out_index` must be null or writable.
int32_t volley_client_index(uint64_t client, uint32_t *out_index);

// Moves this client to a new socket on a new local port (as a NAT rebinding moves a
// player); with `resume_now` nonzero it resumes its session at once with its resume ticket,
// else it does so by itself after a second without a word from the server. The player stays
// the same (its id, world and score); returns 1, or 0 when it holds no ticket to resume with
// yet (`resume_now` only; the socket moved anyway), or a negative error (`VOLLEY_ERR_IO`: no
// new socket could be bound, the old one is kept).
int32_t volley_client_rebind(uint64_t client, int32_t resume_now);

// Sessions this client resumed on a new connection with its resume ticket (after a
// rebinding, or a silence of its link) into `*out_resumes`: returns 1.
//
// # Safety
// `out_resumes` must be null or writable.
int32_t volley_client_resumes(uint64_t client, uint32_t *out_resumes);

// Prediction: the sequence number of the newest input this client sent (each poll with
// an input sends one, numbered on from 1) into `*out_seq`: returns 1, or 0 before the
// first. Record the input under it; a snapshot later says which inputs the server applied
// ([`volley_client_applied_input`]), and the prediction replays the rest on the snapshot's
// state of the player's own entity ([`volley_client_own_entity`]).
//
// # Safety
// `out_seq` must be null or writable.
int32_t volley_client_input_seq(uint64_t client, uint32_t *out_seq);

// Prediction: the sequence number of the newest of this client's inputs that the server
// had applied in the snapshot of `tick` into `*out_seq`: returns 1, or 0 when that
// snapshot is not held or had applied none of them yet.
//
// # Safety
// `out_seq` must be null or writable.
int32_t volley_client_applied_input(uint64_t client, uint32_t tick, uint32_t *out_seq);

// Prediction: the id of this player's own entity in its snapshots into `*out_id`, for a
// game whose worlds give each player an entity under the player's id (the arena): the
// player's id merged with its world's number, so it follows the player across moves.
// Returns 1, or 0 before the client is connected and told its world.
//
// # Safety
// `out_id` must be null or writable.
int32_t volley_client_own_entity(uint64_t client, uint32_t *out_id);

// Takes the next world notice, oldest first (every world the player entered, in order): its
// number into `*out_world`, why into `*out_reason` (`VOLLEY_ENTERED_*`), its kind into
// `kind` (NUL-terminated). Returns 1, or 0 when none waits. When `capacity` is too small
// for the kind, the notice stays, the bytes needed (with the NUL) go to `*out_needed`, and
// the call returns [`VOLLEY_ERR_TOO_SMALL`].
//
// # Safety
// `kind` must be null or hold `capacity` bytes; the outputs must be null or writable.
int32_t volley_client_next_notice(uint64_t client,
                                  uint16_t *out_world,
                                  int32_t *out_reason,
                                  char *kind,
                                  size_t capacity,
                                  size_t *out_needed);

// The scoreboard's size: its columns into `*out_columns`; returns its rows (0 when the
// world keeps none).
//
// # Safety
// `out_columns` must be null or writable.
int32_t volley_client_score_size(uint64_t client, size_t *out_columns);

// The name of column `column` into `buf` (NUL-terminated when `capacity` is enough);
// returns the bytes it needs with the NUL.
//
// # Safety
// `buf` must be null or hold `capacity` bytes.
int32_t volley_client_score_column(uint64_t client, size_t column, char *buf, size_t capacity);

// Row `row` of the scoreboard (rows by player id): the player into `*out_player`, its ping
// into `*out_ping_ms`, its fields into `fields` (`fields_capacity` of them; as many as
// there are columns), its name into `name` (NUL-terminated when `name_capacity` is enough).
// Returns the bytes the name needs with the NUL; [`VOLLEY_ERR_TOO_SMALL`] when the fields do
// not fit (nothing is written then).
//
// # Safety
// `fields` must be null or hold `fields_capacity` values; `name` null or `name_capacity`
// bytes; the outputs null or writable.
int32_t volley_client_score_row(uint64_t client,
                                size_t row,
                                uint32_t *out_player,
                                uint16_t *out_ping_ms,
                                int32_t *fields,
                                size_t fields_capacity,
                                char *name,
                                size_t name_capacity);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* VOLLEY_H */
