/* Links against an installed dsa and calls it: version, a workspace query, a rejected call. */
#include <stdio.h>
#include <string.h>

#include "dsa.h"

int main(void) {
  dsa_topk_args a;
  memset(&a, 0, sizeof a);
  a.num_rows = 4;
  a.max_len = 100;
  a.scores_stride = 100;
  a.topk = 8;
  size_t bytes = 0;
  if (dsa_topk_workspace_size(&a, &bytes) != DSA_OK || bytes == 0) {
    printf("FAIL consumer: workspace query: %s\n", dsa_last_error());
    return 1;
  }
  a.topk = 0;
  const dsa_status st = dsa_topk(&a, NULL, 0, 0);
  if (st != DSA_ERR_INVALID_VALUE || !strstr(dsa_last_error(), "topk")) {
    printf("FAIL consumer: topk = 0 gave %s (%s)\n", dsa_status_string(st), dsa_last_error());
    return 1;
  }
  printf("ok   consumer: dsa %s, workspace %zu bytes, topk = 0 -> %s\n", dsa_version(), bytes, dsa_status_string(st));
  return 0;
}
