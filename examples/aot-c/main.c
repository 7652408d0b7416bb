/*
 * A program around one model compiled by `kiln compile`: reads each input from a .npy file
 * (or a raw file of exactly the input's bytes), runs the model, prints each output's shape and
 * a summary, and with -o DIR writes each output as DIR/output_<i>.npy.
 *
 *   main [-o DIR] [-w DIR] [-n RUNS] [-W NAME.weights] [INPUT_FILE...]
 *
 * A model compiled with `--weights file` needs its weights file (-W); it is read into memory
 * aligned as the header asks.
 * Inputs not given are filled with a fixed pseudo-random pattern; -w DIR writes every input as
 * DIR/input_<i>.npy, to run another engine on the same data. With -n, the model runs RUNS
 * more times and the median and minimum latency are printed. Build it with -DKILN_MODEL=NAME
 * and the folder of NAME.h on the include path (the Makefile beside this file does).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define STR_(a) #a
#define STR(a) STR_(a)
#define M(x) CAT(KILN_MODEL, x)
#include STR(KILN_MODEL.h)

static void die(const char *what, const char *detail) {
    fprintf(stderr, "error: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

/* Memory aligned to `align` bytes, at least one byte, zeroed. */
static void *aligned(size_t bytes, size_t align) {
    size_t rounded = (bytes + align - 1) / align * align;
    void *p = aligned_alloc(align, rounded ? rounded : align);
    if (!p) die("out of memory", NULL);
    memset(p, 0, rounded ? rounded : align);
    return p;
}

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open", path);
    if (fseek(f, 0, SEEK_END) != 0) die("cannot seek", path);
    long n = ftell(f);
    if (n < 0) die("cannot size", path);
    rewind(f);
    unsigned char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) die("cannot read", path);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* The value text of `key` in a .npy header dict, e.g. `'<f4'` or `(1, 784)`. */
static int header_value(const char *header, const char *key, char *out, size_t cap) {
    const char *k = strstr(header, key);
    if (!k) return 0;
    const char *v = strchr(k + strlen(key), ':');
    if (!v) return 0;
    v++;
    while (*v == ' ') v++;
    const char *end = *v == '(' ? strchr(v, ')') : strchr(v + 1, *v == '\'' ? '\'' : ',');
    if (!end) return 0;
    size_t n = (size_t)(end - v) + 1;
    if (n >= cap) return 0;
    memcpy(out, v, n);
    out[n] = 0;
    return 1;
}

/* Appends `text` to `buf` (of `cap` bytes) at `*at`, or ends the program if it does not fit. */
static void append(char *buf, size_t cap, size_t *at, const char *text) {
    size_t n = strlen(text);
    if (*at + n + 1 > cap) die("a .npy header too long for this program", NULL);
    memcpy(buf + *at, text, n + 1);
    *at += n;
}

/* Reads input `i` from `path` into `dst`, checking its element type and shape. */
static void read_input(int i, const char *path, void *dst) {
    size_t len;
    unsigned char *buf = read_file(path, &len);
    size_t want = M(_input_bytes)[i];
    const unsigned char *data = buf;
    if (len >= 10 && memcmp(buf, "\x93NUMPY", 6) == 0) {
        size_t hlen, start;
        if (buf[6] == 1) {
            hlen = buf[8] | (size_t)buf[9] << 8;
            start = 10;
        } else {
            if (len < 12) die("truncated .npy header", path);
            hlen = buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
            start = 12;
        }
        if (start + hlen > len) die("truncated .npy header", path);
        char *header = malloc(hlen + 1);
        memcpy(header, buf + start, hlen);
        header[hlen] = 0;
        char descr[32], shape[512], expect[512], order[16];
        if (!header_value(header, "'descr'", descr, sizeof descr) || !header_value(header, "'shape'", shape, sizeof shape) ||
            !header_value(header, "'fortran_order'", order, sizeof order))
            die("a .npy header without descr, fortran_order or shape", path);
        if (strncmp(order, "False", 5) != 0) die("a .npy file in Fortran order (the model reads row-major data)", path);
        char quoted[40];
        snprintf(quoted, sizeof quoted, "'%s'", M(_input_npy_descr)[i]);
        if (strcmp(descr, quoted) != 0) {
            fprintf(stderr, "error: %s: element type %s, the model's input %d takes %s\n", path, descr, i, quoted);
            exit(1);
        }
        /* The shape as NumPy prints it: (a, b) or (a,) or (). */
        size_t at = 0;
        append(expect, sizeof expect, &at, "(");
        for (int d = 0; d < M(_input_ranks)[i]; d++) {
            char dim[32];
            snprintf(dim, sizeof dim, d ? ", %lld" : "%lld", (long long)M(_input_shapes)[i][d]);
            append(expect, sizeof expect, &at, dim);
        }
        append(expect, sizeof expect, &at, M(_input_ranks)[i] == 1 ? ",)" : ")");
        if (strcmp(shape, expect) != 0) {
            fprintf(stderr, "error: %s: shape %s, the model's input %d has %s\n", path, shape, i, expect);
            exit(1);
        }
        free(header);
        data = buf + start + hlen;
        len -= start + hlen;
    }
    if (len != want) {
        fprintf(stderr, "error: %s: %zu bytes of data, input %d takes %zu\n", path, len, i, want);
        exit(1);
    }
    memcpy(dst, data, want);
    free(buf);
}

/* Writes `bytes` of `src` as DIR/<kind>_<i>.npy (format 1.0) with the given type and shape. */
static void write_npy(const char *dir, const char *kind, int i, const char *name, const char *descr, int rank, const int64_t *shape, size_t bytes, const void *src) {
    char path[4096], header[1024];
    snprintf(path, sizeof path, "%s/%s_%d.npy", dir, kind, i);
    if (!descr[0]) die("no .npy element type for", name);
    size_t at = 0;
    append(header, sizeof header, &at, "{'descr': '");
    append(header, sizeof header, &at, descr);
    append(header, sizeof header, &at, "', 'fortran_order': False, 'shape': (");
    for (int d = 0; d < rank; d++) {
        char dim[32];
        snprintf(dim, sizeof dim, d ? ", %lld" : "%lld", (long long)shape[d]);
        append(header, sizeof header, &at, dim);
    }
    append(header, sizeof header, &at, rank == 1 ? ",), }" : "), }");
    /* Pad with spaces so that the data starts at a multiple of 64, then a newline. */
    while ((10 + at + 1) % 64 != 0) append(header, sizeof header, &at, " ");
    append(header, sizeof header, &at, "\n");
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot create", path);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(at & 0xff), (unsigned char)(at >> 8)};
    if (fwrite(pre, 1, 10, f) != 10 || fwrite(header, 1, at, f) != at ||
        fwrite(src, 1, bytes, f) != bytes || fclose(f) != 0)
        die("cannot write", path);
}

static void summarize(int i, const void *data) {
    printf("output %d %s %s[", i, M(_output_names)[i], M(_output_dtypes)[i]);
    for (int d = 0; d < M(_output_ranks)[i]; d++) printf(d ? ", %lld" : "%lld", (long long)M(_output_shapes)[i][d]);
    printf("]");
    if (strcmp(M(_output_dtypes)[i], "f32") == 0) {
        const float *x = data;
        size_t n = M(_output_bytes)[i] / sizeof(float);
        double sum = 0;
        for (size_t k = 0; k < n; k++) sum += x[k];
        printf(" sum %.6g first", sum);
        for (size_t k = 0; k < n && k < 4; k++) printf(" %.6g", x[k]);
    }
    printf("\n");
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *out_dir = NULL, *in_dir = NULL, *weights_path = NULL;
    int runs = 0, given = 0;
    const char *files[M(_num_inputs) + 1];
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-o") == 0 && a + 1 < argc) out_dir = argv[++a];
        else if (strcmp(argv[a], "-w") == 0 && a + 1 < argc) in_dir = argv[++a];
        else if (strcmp(argv[a], "-W") == 0 && a + 1 < argc) weights_path = argv[++a];
        else if (strcmp(argv[a], "-n") == 0 && a + 1 < argc) runs = atoi(argv[++a]);
        else if (given < M(_num_inputs)) files[given++] = argv[a];
        else die("more input files than the model has inputs", argv[a]);
    }
    void *inputs[M(_num_inputs) + 1];
    void *outputs[M(_num_outputs) + 1];
    uint32_t state = 12345;
    for (int i = 0; i < M(_num_inputs); i++) {
        inputs[i] = aligned(M(_input_bytes)[i], M(_buffer_align));
        if (i < given) {
            read_input(i, files[i], inputs[i]);
            continue;
        }
        /* No file: a fixed pattern, f32 in [-1, 1), i32 and i64 in 0..4096, other types 0. */
        unsigned char *p = inputs[i];
        const char *dtype = M(_input_dtypes)[i];
        size_t width = strcmp(dtype, "i64") == 0 ? 8 : strcmp(dtype, "f32") == 0 || strcmp(dtype, "i32") == 0 ? 4 : 0;
        for (size_t k = 0; width && k + width <= M(_input_bytes)[i]; k += width) {
            state = state * 1664525u + 1013904223u;
            if (dtype[0] == 'f') {
                float v = (float)(state >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
                memcpy(p + k, &v, 4);
            } else if (width == 8) {
                int64_t v = (int64_t)(state >> 20);
                memcpy(p + k, &v, 8);
            } else {
                int32_t v = (int32_t)(state >> 20);
                memcpy(p + k, &v, 4);
            }
        }
    }
    for (int i = 0; in_dir && i < M(_num_inputs); i++)
        write_npy(in_dir, "input", i, M(_input_names)[i], M(_input_npy_descr)[i], M(_input_ranks)[i], M(_input_shapes)[i], M(_input_bytes)[i], inputs[i]);
    for (int i = 0; i < M(_num_outputs); i++) outputs[i] = aligned(M(_output_bytes)[i], M(_buffer_align));
    void *arena = aligned(M(_arena_bytes), M(_arena_align));
#if M(_external_weights)
    if (!weights_path) die("the model's weights are in a file: pass it with -W", NULL);
    size_t weights_len;
    unsigned char *raw = read_file(weights_path, &weights_len);
    /* NAME_run checks the header's magic and fingerprint; the length is the caller's to check. */
    if (weights_len != M(_weights_bytes)) die("the weights file does not have the size the header gives", weights_path);
    void *weights = aligned(weights_len, M(_arena_align));
    memcpy(weights, raw, weights_len);
    free(raw);
#define RUN() M(_run)(weights, arena, (const void *const *)inputs, outputs)
#else
    if (weights_path) die("the model's weights are in its object; -W is for --weights file", NULL);
#define RUN() M(_run)(arena, (const void *const *)inputs, outputs)
#endif

    int32_t status = RUN();
    if (status != 0) die(STR(KILN_MODEL) "_run failed", M(_error_string)(status));
    for (int i = 0; i < M(_num_outputs); i++) {
        summarize(i, outputs[i]);
        if (out_dir)
            write_npy(out_dir, "output", i, M(_output_names)[i], M(_output_npy_descr)[i], M(_output_ranks)[i], M(_output_shapes)[i], M(_output_bytes)[i], outputs[i]);
    }
    if (runs > 0) {
        double *t = malloc(sizeof(double) * (size_t)runs);
        for (int r = 0; r < runs; r++) {
            double start = now_ms();
            status = RUN();
            t[r] = now_ms() - start;
            if (status != 0) die(STR(KILN_MODEL) "_run failed", M(_error_string)(status));
        }
        qsort(t, (size_t)runs, sizeof(double), by_value);
        printf("latency over %d runs: median %.3f ms, min %.3f ms\n", runs, t[runs / 2], t[0]);
        free(t);
    }
    return 0;
}
