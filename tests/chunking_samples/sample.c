#include <stdio.h>
#include <stdlib.h>

struct buffer {
    char *data;
    size_t len;
};

/* Allocate a buffer of n bytes. */
struct buffer *buffer_new(size_t n) {
    struct buffer *b = malloc(sizeof *b);
    b->data = calloc(n, 1);
    b->len = n;
    return b;
}

void buffer_free(struct buffer *b) {
    free(b->data);
    free(b);
}
