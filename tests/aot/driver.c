/* A C driver for an AOT-compiled program, with no Python in it. Compiled once per program
 * name (cc -c -DPROG=NAME driver.c), then linked with each object of that name:
 *   cc driver.o NAME.o -lm -lpthread
 * It declares what NAME.h declares; the counts come from the command line (the tests read
 * them from the header's NAME_NUM_ARGS and NAME_NUM_RESULTS).
 * Modes:
 *   driver run DIR NARGS NRESULTS          read DIR/argI.bin, run once, write DIR/resultJ.bin
 *   driver threads DIR NARGS NRESULTS N    the same inputs on two threads at once, N calls each,
 *                                          each with its own temp; every result must equal
 *                                          DIR/resultJ.bin
 *   driver bench DIR NARGS NRESULTS N      N calls after 3 warm-up calls; the median ms per call
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define ARG_SIZES CAT(PROG, _arg_sizes)
#define RESULT_SIZES CAT(PROG, _result_sizes)
#define TEMP_SIZE CAT(PROG, _temp_size)
#define RUN CAT(PROG, _run)

extern const size_t ARG_SIZES[];
extern const size_t RESULT_SIZES[];
extern const size_t TEMP_SIZE;
int RUN(const void *const *args, void *const *results, void *temp);

static int NUM_ARGS, NUM_RESULTS;
static void **args;
static void **expected;

static void *aligned(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64)) { fprintf(stderr, "out of memory\n"); exit(3); }
    return p;
}

static void *read_file(const char *dir, const char *what, int i, size_t size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%d.bin", dir, what, i);
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(2); }
    void *p = aligned(size);
    if (size && fread(p, 1, size, f) != size) { fprintf(stderr, "%s: not %zu bytes\n", path, size); exit(2); }
    fclose(f);
    return p;
}

static void **new_results(void) {
    void **r = calloc(NUM_RESULTS + 1, sizeof(void *));
    for (int j = 0; j < NUM_RESULTS; j++) r[j] = aligned(RESULT_SIZES[j]);
    return r;
}

static int calls;

static void *thread_main(void *unused) {
    (void)unused;
    void **results = new_results();
    void *temp = TEMP_SIZE ? aligned(TEMP_SIZE) : NULL;
    for (int c = 0; c < calls; c++) {
        for (int j = 0; j < NUM_RESULTS; j++) memset(results[j], 0xA5, RESULT_SIZES[j]);
        if (RUN((const void *const *)args, results, temp)) return (void *)1;
        for (int j = 0; j < NUM_RESULTS; j++)
            if (memcmp(results[j], expected[j], RESULT_SIZES[j])) return (void *)2;
    }
    return NULL;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: %s run|threads|bench DIR NARGS NRESULTS [N]\n", argv[0]); return 2; }
    const char *dir = argv[2];
    NUM_ARGS = atoi(argv[3]);
    NUM_RESULTS = atoi(argv[4]);
    args = calloc(NUM_ARGS + 1, sizeof(void *));
    expected = calloc(NUM_RESULTS + 1, sizeof(void *));
    for (int i = 0; i < NUM_ARGS; i++) args[i] = read_file(dir, "arg", i, ARG_SIZES[i]);
    if (!strcmp(argv[1], "run")) {
        void **results = new_results();
        int status = RUN((const void *const *)args, results, NULL);
        if (status) { fprintf(stderr, "run returned %d\n", status); return 1; }
        for (int j = 0; j < NUM_RESULTS; j++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/result%d.bin", dir, j);
            FILE *f = fopen(path, "wb");
            if (!f || (RESULT_SIZES[j] && fwrite(results[j], 1, RESULT_SIZES[j], f) != RESULT_SIZES[j])) return 2;
            fclose(f);
        }
        return 0;
    }
    calls = argc > 5 ? atoi(argv[5]) : 10;
    if (!strcmp(argv[1], "threads")) {
        for (int j = 0; j < NUM_RESULTS; j++) expected[j] = read_file(dir, "result", j, RESULT_SIZES[j]);
        pthread_t t[2];
        for (int k = 0; k < 2; k++) pthread_create(&t[k], NULL, thread_main, NULL);
        int bad = 0;
        for (int k = 0; k < 2; k++) {
            void *r;
            pthread_join(t[k], &r);
            if (r) { fprintf(stderr, "thread %d: %s\n", k, r == (void *)1 ? "run failed" : "wrong result"); bad = 1; }
        }
        return bad;
    }
    if (!strcmp(argv[1], "bench")) {
        void **results = new_results();
        void *temp = TEMP_SIZE ? aligned(TEMP_SIZE) : NULL;
        for (int c = 0; c < 3; c++) RUN((const void *const *)args, results, temp);
        double *ms = malloc(sizeof(double) * (calls > 0 ? calls : 1));
        for (int c = 0; c < calls; c++) {
            double start = now_ms();
            RUN((const void *const *)args, results, temp);
            ms[c] = now_ms() - start;
        }
        qsort(ms, calls, sizeof(double), by_value);
        printf("%.4f\n", ms[calls / 2]);
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
