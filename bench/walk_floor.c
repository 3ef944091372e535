/* What listing a tree costs with nothing else done: every folder opened and read with
 * getdents64, entries counted, nothing kept, __pycache__ listed but not entered (as cudafix's
 * walk does), on N threads sharing one stack of folders. scan_bench.py builds and runs it beside
 * `cudafix scan` so that the scan's time can be read against the kernel's share of it.
 *
 *   cc -O2 -pthread -o walk_floor bench/walk_floor.c && ./walk_floor DIR THREADS */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char **stack;
static size_t top, cap = 1 << 16;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int busy;
static atomic_long entries;

static void push(char *path) {
  pthread_mutex_lock(&mu);
  if (top == cap) stack = realloc(stack, (cap *= 2) * sizeof *stack);
  stack[top++] = path;
  pthread_mutex_unlock(&mu);
}

/* Counts the taker busy before the stack shrinks: an empty stack and no busy worker is the end. */
static char *pop(void) {
  char *path = NULL;
  pthread_mutex_lock(&mu);
  if (top) {
    path = stack[--top];
    atomic_fetch_add(&busy, 1);
  }
  pthread_mutex_unlock(&mu);
  return path;
}

static void list(const char *dir, char *buf, size_t size) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  long n;
  while ((n = syscall(SYS_getdents64, fd, buf, size)) > 0) {
    for (long off = 0; off < n;) {
      struct dirent64 *e = (struct dirent64 *)(buf + off);
      off += e->d_reclen;
      const char *name = e->d_name;
      if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]))) continue;
      atomic_fetch_add_explicit(&entries, 1, memory_order_relaxed);
      if (e->d_type != DT_DIR || strcmp(name, "__pycache__") == 0) continue;
      size_t a = strlen(dir), b = strlen(name);
      char *child = malloc(a + b + 2);
      memcpy(child, dir, a);
      child[a] = '/';
      memcpy(child + a + 1, name, b + 1);
      push(child);
    }
  }
  close(fd);
}

static void *worker(void *unused) {
  (void)unused;
  static _Thread_local char buf[1 << 16];
  for (;;) {
    char *dir = pop();
    if (!dir) {
      if (atomic_load(&busy) == 0) {
        pthread_mutex_lock(&mu);
        int done = top == 0;
        pthread_mutex_unlock(&mu);
        if (done) return NULL;
      }
      sched_yield();
      continue;
    }
    list(dir, buf, sizeof buf);
    free(dir);
    atomic_fetch_sub(&busy, 1);
  }
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s DIR THREADS\n", argv[0]);
    return 2;
  }
  int threads = atoi(argv[2]);
  if (threads < 1 || threads > 256) threads = 1;
  stack = malloc(cap * sizeof *stack);
  push(strdup(argv[1]));
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  pthread_t pool[256];
  for (int i = 0; i < threads; i++) pthread_create(&pool[i], NULL, worker, NULL);
  for (int i = 0; i < threads; i++) pthread_join(pool[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%ld entries, %d threads, %.2f ms\n", atomic_load(&entries), threads,
         (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6);
  return 0;
}
