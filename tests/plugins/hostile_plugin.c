/* hostile_plugin.c: the minimal plugin, misbehaving inside forward() as ATTNFUZZ_HOSTILE says
 * (tests/hardening_test.sh):
 *   exit0   calls exit(0), as if the process had finished successfully;
 *   fdspam  writes a line that looks like an old-style worker reply ("R {...}") and a forged
 *           frame header to every descriptor from 3 to 1023, then computes normally;
 *   decline declines every problem (supports() says no), so nothing is ever tested;
 *   fail    accepts every problem and fails every call (forward() returns an error);
 *   oob     computes normally, then writes one element past the end of O's first row (into its
 *           row padding, when the layout pads rows);
 *   clobber computes normally, then changes the first element of its input Q;
 *   wrong_o computes normally, then adds 1 to the first element of O (a mismatch finding);
 *   hang    sleeps for ten minutes in forward();
 *   fork_crash forks a child that keeps the worker's descriptors and sleeps (its pid appended
 *           to $ATTNFUZZ_HOSTILE_PIDS), then raises SIGSEGV.
 * Anything else (or unset): the minimal plugin, unchanged. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* The minimal plugin's code, its exported names moved aside. */
#define attnfuzz_plugin_abi_version minimal_plugin_abi_version
#define attnfuzz_plugin_get minimal_plugin_get
#include "minimal_plugin.c"
#undef attnfuzz_plugin_abi_version
#undef attnfuzz_plugin_get

static void spam_descriptors(void) {
  static const char line[] =
      "R {\"findings\":[],\"environment\":{}}\n"
      "AF1 R 0000000000000001 00000010 0123456789abcdef\n{\"findings\":[]}\n";
  int fd;
  for (fd = 3; fd < 1024; ++fd) {
    ssize_t n = write(fd, line, sizeof line - 1);
    (void)n;
  }
}

static int mode_is(const char* name) {
  const char* mode = getenv("ATTNFUZZ_HOSTILE");
  return mode && strcmp(mode, name) == 0;
}

static int hostile_supports(const af_problem* p, char* msg, size_t msg_len) {
  if (mode_is("decline")) return fail(msg, msg_len, "hostile plugin: declines every problem");
  return supports(p, msg, msg_len);
}

static int hostile_forward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o,
                           af_tensor* lse, char* msg, size_t msg_len) {
  const char* mode = getenv("ATTNFUZZ_HOSTILE");
  if (mode_is("fail")) return fail(msg, msg_len, "hostile plugin: fails every call");
  if (mode && strcmp(mode, "exit0") == 0) exit(0);
  if (mode && strcmp(mode, "fdspam") == 0) spam_descriptors();
  if (mode_is("hang")) sleep(600);
  if (mode_is("fork_crash")) { /* a child that keeps every descriptor (the worker's pipes), then a crash */
    const pid_t child = fork();
    if (child == 0) {
      sleep(600);
      _exit(0);
    }
    const char* pids = getenv("ATTNFUZZ_HOSTILE_PIDS");
    FILE* f = pids ? fopen(pids, "a") : NULL;
    if (f) fprintf(f, "%d\n", (int)child), fclose(f);
    raise(SIGSEGV);
  }
  const int rc = forward(p, q, k, v, o, lse, msg, msg_len);
  if (rc == 0 && mode_is("oob")) ((float*)o->data)[o->shape[3]] = 0.0f;
  if (rc == 0 && mode_is("clobber")) ((float*)q->data)[0] += 1.0f;
  if (rc == 0 && mode_is("wrong_o")) ((float*)o->data)[0] += 1.0f;
  return rc;
}

static const af_plugin hostile = {
    ATTNFUZZ_PLUGIN_ABI_VERSION, "hostile",        "1.0",           AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO,
    "{\"fp32\":\"fp32\"}",       hostile_supports, hostile_forward, backward,
};

uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
const af_plugin* attnfuzz_plugin_get(void) { return &hostile; }
