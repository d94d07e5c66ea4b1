/* The exec benchmark's compiled module (eventbus-bench exec compiles it with cc): the same as
 * latency_probe.py — reads every bench.event, posts bench.ack for every 1,000, answers
 * bench.report with bench.result (count, p50_ns, p99_ns of post -> here on CLOCK_MONOTONIC).
 * Reads the protocol's lines with no JSON parser: the event line's members come in a fixed
 * order (docs/modules-any-language.md), so the name and "mono" are found by their text. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int compare(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int main(void) {
    char *line = NULL;
    size_t capacity = 0;
    size_t count = 0, allocated = 1 << 20;
    int64_t *latencies = malloc(allocated * sizeof *latencies);
    if (getline(&line, &capacity, stdin) < 0) return 1; /* the hello */
    printf("{\"type\":\"subscribe\",\"patterns\":[\"bench.event\",\"bench.report\"]}\n");
    fflush(stdout);
    while (getline(&line, &capacity, stdin) >= 0) {
        if (strncmp(line, "{\"type\":\"event\"", 15) != 0) continue;
        if (strstr(line, "\"name\":\"bench.report\"")) {
            qsort(latencies, count, sizeof *latencies, compare);
            int64_t p50 = count ? latencies[count / 2] : -1, p99 = count ? latencies[count * 99 / 100] : -1;
            printf("{\"type\":\"post\",\"name\":\"bench.result\",\"fields\":{\"count\":%zu,\"p50_ns\":%lld,\"p99_ns\":%lld}}\n",
                   count, (long long)p50, (long long)p99);
            fflush(stdout);
            count = 0;
            continue;
        }
        const char *mono = strstr(line, "\"mono\":");
        if (!mono) continue;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t sent = strtoll(mono + 7, NULL, 10);
        if (count == allocated) latencies = realloc(latencies, (allocated *= 2) * sizeof *latencies);
        latencies[count++] = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec - sent;
        if (count % 1000 == 0) {
            printf("{\"type\":\"post\",\"name\":\"bench.ack\",\"fields\":{\"n\":%zu}}\n", count);
            fflush(stdout);
        }
    }
    return 0;
}
