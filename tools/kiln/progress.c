#define _POSIX_C_SOURCE 200809L
#include "progress.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BAR_WIDTH 30

static volatile sig_atomic_t interrupted = 0;

static void on_interrupt(int sig) {
  (void)sig;
  interrupted = 1;
}

void progress_catch_interrupt(int on) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on ? on_interrupt : SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
}

int progress_interrupted(void) { return interrupted != 0; }

progress_mode progress_choose_mode(int quiet) {
  if (quiet) return PROGRESS_QUIET;
  return isatty(STDOUT_FILENO) ? PROGRESS_BAR : PROGRESS_LINES;
}

static void format_duration(double seconds, char *buf, size_t size) {
  long s = (long)(seconds + 0.5);
  if (s >= 3600)
    snprintf(buf, size, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  else if (s >= 60)
    snprintf(buf, size, "%ldm%02lds", s / 60, s % 60);
  else
    snprintf(buf, size, "%lds", s);
}

static void draw_bar(const progress_state *st, const kiln_progress *p) {
  int64_t batches = p->batches > 0 ? p->batches : 1;
  int filled = (int)(BAR_WIDTH * p->batch / batches);
  char bar[BAR_WIDTH + 1];
  for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
  bar[BAR_WIDTH] = '\0';
  double left = p->batch > 0 ? p->elapsed_seconds * (double)(batches - p->batch) / (double)p->batch : 0.0;
  char eta[32];
  format_duration(left, eta, sizeof eta);
  /* \033[K clears what a longer previous line left behind. */
  printf("\repoch %lld/%lld [%s] %lld/%lld  loss %.4f  %.0f samples/s  %s left\033[K", (long long)st->epoch,
         (long long)st->epochs, bar, (long long)p->batch, (long long)p->batches, p->loss, p->samples_per_second,
         eta);
  fflush(stdout);
}

static void print_epoch(const progress_state *st, const kiln_epoch_stats *s) {
  if (st->mode == PROGRESS_BAR) printf("\r\033[K");
  printf("epoch %lld/%lld  loss %.4f  accuracy %.2f%%", (long long)st->epoch, (long long)st->epochs, s->train_loss,
         100.0 * s->train_accuracy);
  if (s->has_validation) printf("  val loss %.4f  val accuracy %.2f%%", s->val_loss, 100.0 * s->val_accuracy);
  printf("  %.1f s  %.0f samples/s\n", s->seconds, s->samples_per_second);
  fflush(stdout);
}

int progress_callback(void *user, const kiln_progress *p) {
  const progress_state *st = user;
  if (st->mode != PROGRESS_QUIET) {
    if (p->phase == KILN_PROGRESS_BATCH && st->mode == PROGRESS_BAR)
      draw_bar(st, p);
    else if (p->phase == KILN_PROGRESS_EPOCH && p->stats)
      print_epoch(st, p->stats);
  }
  return progress_interrupted();
}
