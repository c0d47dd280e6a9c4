/*
 * fastcall_recorder.c — stands in for libdsa's call functions in test_cpu.py's fast-path checks:
 * C functions (so dsa._fastcall can call them as it calls the library's) that keep the bytes of the
 * argument struct they were given and their other arguments, and answer every workspace query with
 * 4096 bytes; after rec_fail_with, they fail with its status. The struct's size is set beforehand (rec_expect): the recorder cannot know it.
 */
#include <stddef.h>
#include <string.h>

#define REC_MAX 1024

static unsigned char g_args[REC_MAX];
static size_t g_bytes;
static void *g_workspace, *g_stream;
static size_t g_workspace_bytes;
static int g_calls, g_status;

void rec_expect(size_t bytes) { g_bytes = bytes < REC_MAX ? bytes : REC_MAX; }

/* Every later call returns `status` (0: success again). */
void rec_fail_with(int status) { g_status = status; }

int rec_call_workspace(const void *args, void *workspace, size_t workspace_bytes, void *stream) {
  memcpy(g_args, args, g_bytes);
  g_workspace = workspace;
  g_workspace_bytes = workspace_bytes;
  g_stream = stream;
  g_calls++;
  return g_status;
}

int rec_call(const void *args, void *stream) { return rec_call_workspace(args, NULL, 0, stream); }

int rec_workspace_size(const void *args, size_t *bytes) {
  (void)args;
  *bytes = 4096;
  return 0;
}

/* The last call: its struct bytes (rec_expect's count) into out; returns the number of calls so far. */
int rec_last(unsigned char *out, void **workspace, size_t *workspace_bytes, void **stream) {
  memcpy(out, g_args, g_bytes);
  *workspace = g_workspace;
  *workspace_bytes = g_workspace_bytes;
  *stream = g_stream;
  return g_calls;
}
