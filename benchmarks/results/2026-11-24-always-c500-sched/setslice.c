#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
struct sched_attr { uint32_t size, sched_policy; uint64_t sched_flags; int32_t sched_nice; uint32_t sched_priority; uint64_t sched_runtime, sched_deadline, sched_period; uint32_t util_min, util_max; };
int main(int argc, char **argv) {
  struct sched_attr a; memset(&a, 0, sizeof a); a.size = sizeof a;
  int tid = atoi(argv[1]); a.sched_policy = 0; a.sched_runtime = strtoull(argv[2], 0, 10);
  a.sched_nice = argc > 3 ? atoi(argv[3]) : 0;
  if (syscall(SYS_sched_setattr, tid, &a, 0)) { perror("sched_setattr"); return 1; }
  struct sched_attr b; memset(&b, 0, sizeof b);
  syscall(SYS_sched_getattr, tid, &b, sizeof b, 0);
  fprintf(stderr, "tid %d runtime %llu nice %d\n", tid, (unsigned long long)b.sched_runtime, b.sched_nice);
  return 0;
}
