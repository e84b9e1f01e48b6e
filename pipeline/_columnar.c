/* The fleet reader's compiled fast path: runs of record batches into Arrow column buffers.

Owns: `decode_run(data, pos, is_log, expected_offset, last_epoch, snapshot_last_offset)`,
called by pipeline/columnar.py. It walks the batches of one segment or snapshot file
from `pos` and decodes every batch it fully understands into column buffers (the
layout pipeline/columnar.py turns into pyarrow arrays without copying per value).

Rules kept here:
- It accepts a strict subset of what pipeline/reader.py accepts, never more. A batch
  is decoded here only when every check protocol/record_batch.py's decode_batch makes
  passes (length, magic, CRC-32C, attributes, record framing, header keys), the
  segment's continuity holds (base offset, non-decreasing epoch), it is not a control
  batch, and every record in it is one of the record types below, at a version the
  message declares, decoding exactly as protocol/ decodes it (ASCII strings only,
  tagged fields ascending with matching sizes, no trailing bytes). Anything else --
  a damaged batch, a control batch, another record type, a non-ASCII string -- STOPS
  the run at that batch, and the Python reader handles that one batch with the
  ordinary codec (so every error row is the Python reader's, word for word), then
  calls back here for the rest.
- A batch's rows are committed only when the whole batch decoded: a failure halfway
  rolls the column buffers back to the batch's start.
- Bounded: every loop advances through `data` or ends; no allocation depends on a
  length field that was not checked against the bytes present.

Record types decoded (the ones a fleet's answers are built from):
  0 RegisterBrokerRecord v0-4, 1 UnregisterBrokerRecord v0, 7 FenceBrokerRecord v0,
  8 UnfenceBrokerRecord v0, 12 FeatureLevelRecord v0, 17 BrokerRegistrationChangeRecord v0-3.
Their schemas are protocol/metadata_records.py's; tests/pipeline_source compare this
path with the Python reader on every record of fake fleets, damaged ones included.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ CRC-32C */

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
}

static uint32_t crc32c_soft(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c; /* little-endian host assumed for the slicing tables; see crc32c_any */
        c = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^ crc_table[5][(w >> 16) & 0xFF] ^
            crc_table[4][(w >> 24) & 0xFF] ^ crc_table[3][(w >> 32) & 0xFF] ^ crc_table[2][(w >> 40) & 0xFF] ^
            crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint32_t crc32c_bytewise(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n--) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(const uint8_t *p, size_t n) {
    uint64_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32 ^ 0xFFFFFFFFu;
}
static int have_hw_crc = 0;
#endif

static int little_endian_host = 1;

static uint32_t crc32c_any(const uint8_t *p, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (have_hw_crc) return crc32c_hw(p, n);
#endif
    return little_endian_host ? crc32c_soft(p, n) : crc32c_bytewise(p, n);
}

/* ------------------------------------------------------------------ big-endian reads */

static inline int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

/* ------------------------------------------------------------------ growable buffers */

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

/* The Raw allocator: decoding runs without the GIL, which PyMem_Realloc needs. */
static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *d = PyMem_RawRealloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}
static inline int buf_put(Buf *b, const void *p, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}
static inline int put_i64(Buf *b, int64_t v) { return buf_put(b, &v, 8); }
static inline int put_i32(Buf *b, int32_t v) { return buf_put(b, &v, 4); }
static inline int put_u8(Buf *b, uint8_t v) { return buf_put(b, &v, 1); }

/* Column buffers, in the order pipeline/columnar.py reads them. Validity and boolean
   columns hold one byte per row here and are packed into Arrow bitmaps at the end. */
enum {
    C_OFFSET,        /* int64 */
    C_EPOCH,         /* int32 */
    C_TIMESTAMP,     /* int64 */
    C_API_KEY,       /* int16: the record type's api key */
    C_VERSION,       /* int32 */
    C_FEAT_VALID,    /* u8 */
    C_FEAT_NAME_OFF, /* int32 offsets, n + 1 */
    C_FEAT_NAME,     /* bytes */
    C_FEAT_LEVEL,    /* int32 */
    C_BRK_VALID,     /* u8 */
    C_BRK_ID,        /* int32 */
    C_BRK_EPOCH,     /* int64 */
    C_INC_VALID,     /* u8 */
    C_INC_OFF,       /* int32 offsets */
    C_INC,           /* bytes */
    C_FENCED_VALID,  /* u8 */
    C_FENCED,        /* u8 */
    C_ICS_VALID,     /* u8 */
    C_ICS,           /* u8 */
    C_RACK_VALID,    /* u8 */
    C_RACK_OFF,      /* int32 offsets */
    C_RACK,          /* bytes */
    C_MVMIN_VALID,   /* u8 */
    C_MVMIN,         /* int32 */
    C_MVMAX_VALID,   /* u8 */
    C_MVMAX,         /* int32 */
    C_DIRS_VALID,    /* u8 */
    C_DIRS_OFF,      /* int32 list offsets, n + 1 */
    C_DIR_OFF,       /* int32 offsets of the list items' strings, items + 1 */
    C_DIR,           /* bytes */
    C_COUNT
};

typedef struct {
    Buf b[C_COUNT];
    int64_t rows;
    int64_t dir_items;
} Cols;

static void cols_free(Cols *c) {
    for (int i = 0; i < C_COUNT; i++) PyMem_RawFree(c->b[i].data);
}

typedef struct {
    Py_ssize_t len[C_COUNT];
    int64_t rows;
    int64_t dir_items;
} Mark;

static void cols_mark(Cols *c, Mark *m) {
    for (int i = 0; i < C_COUNT; i++) m->len[i] = c->b[i].len;
    m->rows = c->rows;
    m->dir_items = c->dir_items;
}
static void cols_rollback(Cols *c, Mark *m) {
    for (int i = 0; i < C_COUNT; i++) c->b[i].len = m->len[i];
    c->rows = m->rows;
    c->dir_items = m->dir_items;
}

static inline int32_t last_off(Buf *b) { return ((int32_t *)b->data)[b->len / 4 - 1]; }

/* ------------------------------------------------------------------ record parsing */

/* A cursor over one record value. `bad` is set on anything outside the accepted subset;
   every read checks it first, so a parse just runs on and the caller checks once. */
typedef struct {
    const uint8_t *p;
    const uint8_t *end;
    int bad;
} Cur;

static inline uint32_t cur_uvarint(Cur *c) {
    /* protocol.primitives.read_uvarint: at most 5 bytes, at most 32 bits. */
    uint64_t result = 0;
    for (int i = 0; i < 5; i++) {
        if (c->p >= c->end) { c->bad = 1; return 0; }
        uint8_t b = *c->p++;
        result |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            if (result > 0xFFFFFFFFull) { c->bad = 1; return 0; }
            return (uint32_t)result;
        }
    }
    c->bad = 1;
    return 0;
}
static inline const uint8_t *cur_take(Cur *c, Py_ssize_t n) {
    if (c->bad || n < 0 || c->end - c->p < n) { c->bad = 1; return NULL; }
    const uint8_t *p = c->p;
    c->p += n;
    return p;
}
static inline int64_t cur_i64(Cur *c) { const uint8_t *p = cur_take(c, 8); return p ? be64(p) : 0; }
static inline int32_t cur_i32(Cur *c) { const uint8_t *p = cur_take(c, 4); return p ? be32(p) : 0; }
static inline int16_t cur_i16(Cur *c) { const uint8_t *p = cur_take(c, 2); return p ? be16(p) : 0; }
static inline int8_t cur_i8(Cur *c) { const uint8_t *p = cur_take(c, 1); return p ? (int8_t)p[0] : 0; }

static int ascii(const uint8_t *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] >= 0x80) return 0;
    return 1;
}

/* A compact string: uvarint(len + 1), 0 = null. Returns 1 with (*out, *n) set, 0 for
   null (only when nullable; a null in a non-nullable field is outside the subset).
   Non-ASCII text is outside the subset: ASCII decodes the same under any UTF-8 rule. */
static int cur_cstring(Cur *c, int nullable, const uint8_t **out, Py_ssize_t *n) {
    uint32_t len = cur_uvarint(c);
    if (c->bad) return 0;
    if (len == 0) {
        if (!nullable) c->bad = 1;
        return 0;
    }
    const uint8_t *p = cur_take(c, (Py_ssize_t)len - 1);
    if (!p) return 0;
    if (!ascii(p, (Py_ssize_t)len - 1)) { c->bad = 1; return 0; }
    *out = p;
    *n = (Py_ssize_t)len - 1;
    return 1;
}

/* A compact array's count: -1 for null (only when nullable). */
static int64_t cur_count(Cur *c, int nullable) {
    uint32_t n = cur_uvarint(c);
    if (c->bad) return 0;
    if (n == 0) {
        if (!nullable) c->bad = 1;
        return -1;
    }
    return (int64_t)n - 1;
}

/* A tagged-field section. `known` lists the tags this struct knows in this version;
   `parse(tag, cursor over the field, ctx)` parses a known one (it must consume it
   exactly). Unknown tags are skipped (protocol/ keeps them aside). */
typedef void (*TagParser)(int tag, Cur *field, void *ctx);

static void cur_tags(Cur *c, const int *known, int nknown, TagParser parse, void *ctx) {
    uint32_t count = cur_uvarint(c);
    int64_t last = -1;
    for (uint32_t i = 0; i < count && !c->bad; i++) {
        uint32_t tag = cur_uvarint(c);
        if (c->bad) return;
        if ((int64_t)tag <= last) { c->bad = 1; return; }
        last = tag;
        uint32_t size = cur_uvarint(c);
        const uint8_t *p = cur_take(c, size);
        if (!p) return;
        int is_known = 0;
        for (int k = 0; k < nknown; k++)
            if (known[k] == (int)tag) is_known = 1;
        if (is_known) {
            Cur field = {p, p + size, 0};
            parse((int)tag, &field, ctx);
            if (field.bad || field.p != field.end) { c->bad = 1; return; }
        }
    }
}

static void no_tags(int tag, Cur *field, void *ctx) {
    (void)tag; (void)ctx;
    field->bad = 1;
}

static const char B64URL[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* server.storage.meta_properties.uuid_to_string: base64url of the 16 bytes, unpadded. */
static void uuid_text(const uint8_t *u, char out[22]) {
    int o = 0;
    for (int i = 0; i < 15; i += 3) {
        uint32_t v = ((uint32_t)u[i] << 16) | ((uint32_t)u[i + 1] << 8) | u[i + 2];
        out[o++] = B64URL[(v >> 18) & 63];
        out[o++] = B64URL[(v >> 12) & 63];
        out[o++] = B64URL[(v >> 6) & 63];
        out[o++] = B64URL[v & 63];
    }
    uint32_t v = (uint32_t)u[15] << 16;
    out[o++] = B64URL[(v >> 18) & 63];
    out[o++] = B64URL[(v >> 12) & 63];
}

/* What one record contributes to the broker / feature columns. */
typedef struct {
    int feature;               /* FeatureLevelRecord */
    const uint8_t *feat_name;
    Py_ssize_t feat_name_len;
    int32_t feat_level;
    int broker;                /* one of the broker records */
    int32_t broker_id;
    int64_t broker_epoch;
    const uint8_t *incarnation; /* 16 bytes or NULL */
    int fenced;                /* -1 null, 0, 1 */
    int ics;                   /* -1 null, 0, 1 */
    int has_rack;
    const uint8_t *rack;
    Py_ssize_t rack_len;
    int has_mv;
    int32_t mv_min, mv_max;
    int dirs_mode;             /* 0: null; 1: a list (possibly empty) */
    const uint8_t *dirs;       /* count * 16 bytes of uuids */
    int64_t dirs_count;
    /* BrokerRegistrationChangeRecord's tagged values */
    int8_t change_fenced, change_ics;
} Out;

/* A []uuid (compact array of 16-byte uuids). */
static void cur_uuid_array(Cur *c, int nullable, const uint8_t **items, int64_t *count) {
    int64_t n = cur_count(c, nullable);
    if (c->bad) return;
    if (n < 0) { *items = NULL; *count = -1; return; }
    if (n > (c->end - c->p) / 16) { c->bad = 1; return; }
    *items = cur_take(c, (Py_ssize_t)(n * 16));
    *count = n;
}

typedef struct {
    Out *out;
    int version;
} TagCtx;

static void change_tags(int tag, Cur *f, void *vctx) {
    TagCtx *t = vctx;
    const uint8_t *items;
    int64_t count;
    switch (tag) {
    case 0: t->out->change_fenced = cur_i8(f); break;
    case 1: t->out->change_ics = cur_i8(f); break;
    case 2:
        cur_uuid_array(f, 0, &items, &count);
        if (!f->bad) { t->out->dirs = items; t->out->dirs_count = count; }
        break;
    case 3: cur_uuid_array(f, 1, &items, &count); break;
    default: f->bad = 1;
    }
}

static void register_tags(int tag, Cur *f, void *vctx) {
    TagCtx *t = vctx;
    const uint8_t *items;
    int64_t count;
    switch (tag) {
    case 0:
        cur_uuid_array(f, 0, &items, &count);
        if (!f->bad) { t->out->dirs = items; t->out->dirs_count = count; }
        break;
    case 1: cur_uuid_array(f, 1, &items, &count); break;
    default: f->bad = 1;
    }
}

static const int TAGS_CHANGE[4][4] = {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}};
static const int TAGS_REGISTER[5][2] = {{0}, {0}, {0}, {0}, {0, 1}};

/* Decodes one metadata record value (frame version, api key, version, body). Returns
   the api key, or -1 when the record is outside the subset. */
static int decode_value(const uint8_t *p, Py_ssize_t n, int *version_out, Out *o) {
    Cur c = {p, p + n, 0};
    memset(o, 0, sizeof(*o));
    o->fenced = o->ics = -1;
    uint32_t frame = cur_uvarint(&c);
    uint32_t api_key = cur_uvarint(&c);
    uint32_t version = cur_uvarint(&c);
    if (c.bad || frame != 1) return -1;
    *version_out = (int)version;
    switch (api_key) {
    case 0: { /* RegisterBrokerRecord v0-4 */
        if (version > 4) return -1;
        o->broker = 1;
        o->broker_id = cur_i32(&c);
        if (version >= 2) (void)cur_i8(&c); /* IsMigratingZkBroker */
        o->incarnation = cur_take(&c, 16);
        o->broker_epoch = cur_i64(&c);
        int64_t endpoints = cur_count(&c, 0);
        for (int64_t i = 0; i < endpoints && !c.bad; i++) {
            const uint8_t *s;
            Py_ssize_t sl;
            cur_cstring(&c, 0, &s, &sl); /* Name */
            cur_cstring(&c, 0, &s, &sl); /* Host */
            (void)cur_i16(&c);           /* Port */
            (void)cur_i16(&c);           /* SecurityProtocol */
            cur_tags(&c, NULL, 0, no_tags, NULL);
        }
        int64_t features = cur_count(&c, 0);
        for (int64_t i = 0; i < features && !c.bad; i++) {
            const uint8_t *s = NULL;
            Py_ssize_t sl = 0;
            cur_cstring(&c, 0, &s, &sl);
            int16_t lo = cur_i16(&c);
            int16_t hi = cur_i16(&c);
            cur_tags(&c, NULL, 0, no_tags, NULL);
            if (!c.bad && sl == 16 && memcmp(s, "metadata.version", 16) == 0) {
                /* the last metadata.version entry wins, as in pipeline/reader.py */
                o->has_mv = 1;
                o->mv_min = lo;
                o->mv_max = hi;
            }
        }
        o->has_rack = cur_cstring(&c, 1, &o->rack, &o->rack_len);
        int8_t fenced = cur_i8(&c);
        o->fenced = fenced != 0;
        if (version >= 1) o->ics = cur_i8(&c) != 0;
        TagCtx t = {o, (int)version};
        o->dirs = NULL;
        o->dirs_count = 0;
        cur_tags(&c, TAGS_REGISTER[version], version >= 4 ? 2 : (version >= 3 ? 1 : 0), register_tags, &t);
        o->dirs_mode = version >= 3;
        break;
    }
    case 1: /* UnregisterBrokerRecord v0 */
    case 7: /* FenceBrokerRecord v0 */
    case 8: /* UnfenceBrokerRecord v0 */
        if (version != 0) return -1;
        o->broker = 1;
        o->broker_id = cur_i32(&c);
        o->broker_epoch = cur_i64(&c);
        if (api_key == 7) o->fenced = 1;
        if (api_key == 8) o->fenced = 0;
        cur_tags(&c, NULL, 0, no_tags, NULL);
        break;
    case 12: /* FeatureLevelRecord v0 */
        if (version != 0) return -1;
        o->feature = 1;
        cur_cstring(&c, 0, &o->feat_name, &o->feat_name_len);
        o->feat_level = cur_i16(&c);
        cur_tags(&c, NULL, 0, no_tags, NULL);
        break;
    case 17: { /* BrokerRegistrationChangeRecord v0-3 */
        if (version > 3) return -1;
        o->broker = 1;
        o->broker_id = cur_i32(&c);
        o->broker_epoch = cur_i64(&c);
        o->change_fenced = 0;
        o->change_ics = 0;
        o->dirs = NULL;
        o->dirs_count = 0;
        TagCtx t = {o, (int)version};
        cur_tags(&c, TAGS_CHANGE[version], (int)version + 1, change_tags, &t);
        /* pipeline/reader.py's _FENCING_CHANGE / _SHUTDOWN_CHANGE */
        o->fenced = o->change_fenced == 1 ? 1 : (o->change_fenced == -1 ? 0 : -1);
        o->ics = o->change_ics == 1 ? 1 : -1;
        o->dirs_mode = o->dirs_count > 0; /* an empty list means "unchanged": null */
        break;
    }
    default:
        return -1;
    }
    if (c.bad || c.p != c.end) return -1; /* outside the subset, or trailing bytes */
    return (int)api_key;
}

/* ------------------------------------------------------------------ rows */

static int put_str(Buf *off, Buf *data, const void *p, Py_ssize_t n) {
    if (buf_put(data, p, n) < 0) return -1;
    if (data->len > INT32_MAX) return -1;
    return put_i32(off, (int32_t)data->len);
}

static int emit_row(Cols *c, int64_t offset, int32_t epoch, int64_t ts, int api_key, int version, Out *o) {
    Buf *b = c->b;
    char text[22];
    if (put_i64(&b[C_OFFSET], offset) || put_i32(&b[C_EPOCH], epoch) || put_i64(&b[C_TIMESTAMP], ts)) return -1;
    int16_t key16 = (int16_t)api_key;
    if (buf_put(&b[C_API_KEY], &key16, 2) || put_i32(&b[C_VERSION], version)) return -1;
    /* feature */
    if (put_u8(&b[C_FEAT_VALID], o->feature)) return -1;
    if (put_str(&b[C_FEAT_NAME_OFF], &b[C_FEAT_NAME], o->feat_name, o->feature ? o->feat_name_len : 0)) return -1;
    if (put_i32(&b[C_FEAT_LEVEL], o->feature ? o->feat_level : 0)) return -1;
    /* broker */
    int brk = o->broker;
    if (put_u8(&b[C_BRK_VALID], brk) || put_i32(&b[C_BRK_ID], brk ? o->broker_id : 0) ||
        put_i64(&b[C_BRK_EPOCH], brk ? o->broker_epoch : 0))
        return -1;
    int inc = brk && o->incarnation != NULL;
    if (inc) uuid_text(o->incarnation, text);
    if (put_u8(&b[C_INC_VALID], inc) || put_str(&b[C_INC_OFF], &b[C_INC], text, inc ? 22 : 0)) return -1;
    if (put_u8(&b[C_FENCED_VALID], brk && o->fenced >= 0) || put_u8(&b[C_FENCED], brk && o->fenced == 1)) return -1;
    if (put_u8(&b[C_ICS_VALID], brk && o->ics >= 0) || put_u8(&b[C_ICS], brk && o->ics == 1)) return -1;
    int rack = brk && o->has_rack;
    if (put_u8(&b[C_RACK_VALID], rack) || put_str(&b[C_RACK_OFF], &b[C_RACK], o->rack, rack ? o->rack_len : 0))
        return -1;
    int mv = brk && o->has_mv;
    if (put_u8(&b[C_MVMIN_VALID], mv) || put_i32(&b[C_MVMIN], mv ? o->mv_min : 0) ||
        put_u8(&b[C_MVMAX_VALID], mv) || put_i32(&b[C_MVMAX], mv ? o->mv_max : 0))
        return -1;
    int dirs = brk && o->dirs_mode;
    if (put_u8(&b[C_DIRS_VALID], dirs)) return -1;
    if (dirs) {
        for (int64_t i = 0; i < o->dirs_count; i++) {
            uuid_text(o->dirs + 16 * i, text);
            if (put_str(&b[C_DIR_OFF], &b[C_DIR], text, 22)) return -1;
        }
        c->dir_items += o->dirs_count;
    }
    if (c->dir_items > INT32_MAX || put_i32(&b[C_DIRS_OFF], (int32_t)c->dir_items)) return -1;
    c->rows++;
    return 0;
}

/* ------------------------------------------------------------------ batches */

/* protocol.record_batch._varint_at: a zigzag varint (varlong with `longer`). */
static inline int zz_varint(const uint8_t **pp, const uint8_t *end, int longer, int64_t *out) {
    const uint8_t *p = *pp;
    uint64_t raw = 0;
    int max = longer ? 10 : 5;
    for (int i = 0; i < max; i++) {
        if (p >= end) return -1;
        uint8_t b = *p++;
        if (i == 9 && b > 1) return -1; /* beyond 64 bits: leave it to Python */
        raw |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            if (!longer && raw > 0xFFFFFFFFull) return -1;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *pp = p;
            return 0;
        }
    }
    return -1;
}

static const char REPLAY_KEY[] = "kraftwerk.replay_offset";

#define HEADER_BYTES 61
#define MAX_BATCH_BYTES (8 * 1024 * 1024)

/* Decodes the batch at data[pos:]; returns its size, or 0 when it is outside the
   subset (the caller stops there). Rows are appended to `c` (rolled back by the caller
   on 0). */
static Py_ssize_t decode_one(const uint8_t *data, Py_ssize_t len, Py_ssize_t pos, int is_log, int has_expected,
                             int64_t expected, int32_t last_epoch, int64_t snapshot_last, Cols *c, int64_t *base_out,
                             int32_t *epoch_out, int64_t *count_out) {
    Py_ssize_t avail = len - pos;
    if (avail < HEADER_BYTES) return 0;
    const uint8_t *h = data + pos;
    int64_t base_offset = be64(h);
    int32_t length = be32(h + 8);
    int32_t epoch = be32(h + 12);
    if (length < HEADER_BYTES - 12) return 0;
    int64_t size = (int64_t)length + 12;
    if (size > MAX_BATCH_BYTES || size > avail) return 0;
    if (h[16] != 2) return 0;
    uint32_t stored = (uint32_t)be32(h + 17);
    if (crc32c_any(h + 21, (size_t)(size - 21)) != stored) return 0;
    int16_t attributes = be16(h + 21);
    if (attributes & 0x07) return 0;              /* compression */
    if (attributes & ~(0x10 | 0x20)) return 0;    /* unsupported bits */
    if (attributes & 0x20) return 0;              /* control batch: Python's */
    int32_t last_offset_delta = be32(h + 23);
    int64_t max_ts = be64(h + 35);
    int32_t record_count = be32(h + 57);
    if (last_offset_delta < 0 || record_count < 0) return 0;
    if (is_log && has_expected && (base_offset != expected || epoch < last_epoch)) return 0;
    const uint8_t *p = h + HEADER_BYTES;
    const uint8_t *end = h + size;
    if (record_count > (end - p) / 7) return 0;
    int64_t previous = -1;
    for (int32_t r = 0; r < record_count; r++) {
        int64_t rlen, tsd, od, klen, vlen, hcount;
        if (zz_varint(&p, end, 0, &rlen) < 0) return 0;
        if (rlen < 0 || rlen > end - p) return 0;
        const uint8_t *rend = p + rlen;
        p += 1; /* attributes */
        if (p > rend) return 0;
        if (zz_varint(&p, rend, 1, &tsd) < 0) return 0;
        if (zz_varint(&p, rend, 0, &od) < 0) return 0;
        if (od <= previous || od > last_offset_delta) return 0;
        previous = od;
        if (zz_varint(&p, rend, 0, &klen) < 0) return 0;
        if (klen != -1) {
            if (klen < 0 || klen > rend - p) return 0;
            p += klen;
        }
        if (zz_varint(&p, rend, 0, &vlen) < 0) return 0;
        if (vlen < 0 || vlen > rend - p) return 0; /* a null value is an error row: Python's */
        const uint8_t *value = p;
        p += vlen;
        if (zz_varint(&p, rend, 0, &hcount) < 0) return 0;
        if (hcount < 0 || hcount > rlen) return 0;
        int64_t offset = base_offset + od;
        int replay_found = 0;
        int64_t replay = 0;
        for (int64_t i = 0; i < hcount; i++) {
            int64_t hk, hv;
            if (zz_varint(&p, rend, 0, &hk) < 0) return 0;
            if (hk < 0 || hk > rend - p) return 0;
            const uint8_t *key = p;
            if (!ascii(key, hk)) return 0; /* header keys must be UTF-8: ASCII surely is */
            p += hk;
            if (zz_varint(&p, rend, 0, &hv) < 0) return 0;
            const uint8_t *hval = NULL;
            if (hv != -1) {
                if (hv < 0 || hv > rend - p) return 0;
                hval = p;
                p += hv;
            }
            if (!replay_found && hk == (int64_t)(sizeof(REPLAY_KEY) - 1) && memcmp(key, REPLAY_KEY, hk) == 0 &&
                hval != NULL && hv == 8) {
                replay_found = 1;
                replay = be64(hval);
            }
        }
        if (p != rend) return 0;
        if (!is_log) offset = replay_found ? replay : snapshot_last;
        int version = 0;
        Out o;
        int api_key = decode_value(value, vlen, &version, &o);
        if (api_key < 0) return 0;
        if (emit_row(c, offset, epoch, max_ts, api_key, version, &o) < 0) return -1;
    }
    if (p != end) return 0;
    *base_out = base_offset;
    *epoch_out = epoch;
    *count_out = record_count;
    return (Py_ssize_t)size;
}

/* ------------------------------------------------------------------ Python glue */

static void pack_bits(const uint8_t *bytes, int64_t n, uint8_t *out) {
    memset(out, 0, (size_t)((n + 7) / 8));
    for (int64_t i = 0; i < n; i++)
        if (bytes[i]) out[i >> 3] |= (uint8_t)(1u << (i & 7));
}

static int is_bytewise(int i) {
    switch (i) {
    case C_FEAT_VALID: case C_BRK_VALID: case C_INC_VALID: case C_FENCED_VALID: case C_FENCED:
    case C_ICS_VALID: case C_ICS: case C_RACK_VALID: case C_MVMIN_VALID: case C_MVMAX_VALID: case C_DIRS_VALID:
        return 1;
    default:
        return 0;
    }
}

static PyObject *cols_to_tuple(Cols *c) {
    PyObject *t = PyTuple_New(C_COUNT);
    if (!t) return NULL;
    for (int i = 0; i < C_COUNT; i++) {
        PyObject *item;
        if (is_bytewise(i)) {
            item = PyBytes_FromStringAndSize(NULL, (c->rows + 7) / 8);
            if (item) pack_bits((uint8_t *)c->b[i].data, c->rows, (uint8_t *)PyBytes_AS_STRING(item));
        } else {
            item = PyBytes_FromStringAndSize(c->b[i].len ? c->b[i].data : "", c->b[i].len);
        }
        if (!item) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, i, item);
    }
    return t;
}

PyDoc_STRVAR(decode_run_doc,
"decode_run(data, pos, is_log, expected_offset, last_epoch, snapshot_last_offset)\n"
"-> (rows, columns, next_pos, expected_offset, last_epoch)\n\n"
"Decodes batches from `pos` until the end of `data` or the first batch outside the\n"
"compiled subset (next_pos is then that batch's position). expected_offset is None\n"
"when unknown. columns: a tuple of bytes, see pipeline/columnar.py.");

static PyObject *decode_run(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t pos;
    int is_log;
    PyObject *expected_obj;
    int last_epoch;
    long long snapshot_last;
    if (!PyArg_ParseTuple(args, "y*npOiL", &view, &pos, &is_log, &expected_obj, &last_epoch, &snapshot_last))
        return NULL;
    int has_expected = expected_obj != Py_None;
    int64_t expected = 0;
    if (has_expected) {
        expected = PyLong_AsLongLong(expected_obj);
        if (expected == -1 && PyErr_Occurred()) { PyBuffer_Release(&view); return NULL; }
    }
    Cols c;
    memset(&c, 0, sizeof(c));
    /* offsets columns start with 0 */
    int failed = put_i32(&c.b[C_FEAT_NAME_OFF], 0) || put_i32(&c.b[C_INC_OFF], 0) || put_i32(&c.b[C_RACK_OFF], 0) ||
                 put_i32(&c.b[C_DIRS_OFF], 0) || put_i32(&c.b[C_DIR_OFF], 0);
    const uint8_t *data = view.buf;
    Py_ssize_t len = view.len;
    int32_t epoch_state = last_epoch;
    if (pos < 0 || pos > len) failed = 1;
    Py_BEGIN_ALLOW_THREADS
    while (!failed && pos < len) {
        Mark m;
        cols_mark(&c, &m);
        int64_t base = 0, count = 0;
        int32_t epoch = 0;
        Py_ssize_t size = decode_one(data, len, pos, is_log, has_expected, expected, epoch_state,
                                     (int64_t)snapshot_last, &c, &base, &epoch, &count);
        if (size < 0) { failed = 1; break; }
        if (size == 0) { cols_rollback(&c, &m); break; }
        if (is_log) {
            has_expected = 1;
            expected = base + count;
            epoch_state = epoch;
        }
        pos += size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (failed) {
        cols_free(&c);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    PyObject *columns = cols_to_tuple(&c);
    cols_free(&c);
    if (!columns) return NULL;
    PyObject *exp = has_expected ? PyLong_FromLongLong(expected) : (Py_INCREF(Py_None), Py_None);
    return Py_BuildValue("(LNnNi)", (long long)c.rows, columns, pos, exp, (int)epoch_state);
}

PyDoc_STRVAR(crc32c_doc, "crc32c(data) -> int: CRC-32C (Castagnoli), as the crc32c package computes it.");

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    uint32_t v = crc32c_any(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(v);
}

static PyMethodDef methods[] = {
    {"decode_run", decode_run, METH_VARARGS, decode_run_doc},
    {"crc32c", py_crc32c, METH_VARARGS, crc32c_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pipeline._columnar", "The fleet reader's compiled fast path (see _columnar.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columnar(void) {
    uint16_t probe = 1;
    little_endian_host = *(uint8_t *)&probe == 1;
    crc_init();
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    have_hw_crc = __builtin_cpu_supports("sse4.2");
#endif
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "COLUMNS", C_COUNT) < 0) { Py_DECREF(m); return NULL; }
    return m;
}
