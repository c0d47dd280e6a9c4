/*
 * check.c — see check.h.
 */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>

static dsa_ck_handler g_handler;

void dsa_ck_set_handler(dsa_ck_handler h) { g_handler = h; }

void dsa_ck_failed(const char *file, int line, const char *call, const char *message) {
  if (g_handler) {
    g_handler(file, line, call, message);
    return;
  }
  fprintf(stderr, "%s:%d: %s: %s\n", file, line, call, message);
  exit(1);
}
