/* The argument checks of an object's NAME_run and the sentences of NAME_error_string, for the
 * model compiled as `m` (one input, one output): each bad argument is a status, never a crash.
 * Prints one line per case; crates/cli/tests/aot.rs compares them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "m.h"

int main(void) {
    void *arena = aligned_alloc(64, (m_arena_bytes + 64) / 64 * 64 + 64);
    void *in = aligned_alloc(64, (m_input_bytes[0] + 64) / 64 * 64);
    void *out = aligned_alloc(64, (m_output_bytes[0] + 64) / 64 * 64);
    memset(in, 0, m_input_bytes[0]);
    const void *inputs[1] = {in};
    void *outputs[1] = {out};
    const void *misaligned_in[1] = {(const char *)in + 4};
    const void *null_in[1] = {NULL};
    printf("ok %d\n", m_run(arena, inputs, outputs));
    printf("null arena %d\n", m_run(NULL, inputs, outputs));
    printf("misaligned arena %d\n", m_run((char *)arena + 16, inputs, outputs));
    printf("null inputs array %d\n", m_run(arena, NULL, outputs));
    printf("null outputs array %d\n", m_run(arena, inputs, NULL));
    printf("null input %d\n", m_run(arena, null_in, outputs));
    printf("misaligned input %d\n", m_run(arena, misaligned_in, outputs));
    int statuses[] = {0, -1, -2, -3, -4, 100000, -2147483647 - 1};
    for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++) printf("status %d: %s\n", statuses[i], m_error_string(statuses[i]));
    return 0;
}
