/* Training progress output for `kiln train`: a live bar redrawn with '\r'
 * when stdout is a terminal, one plain line per epoch otherwise (logs, CI),
 * nothing per epoch with --quiet. Ctrl-C stops training after the current
 * batch through the progress callback's return value. */
#ifndef KILN_TOOLS_PROGRESS_H
#define KILN_TOOLS_PROGRESS_H

#include <stdint.h>

#include <kiln/kiln.h>

typedef enum progress_mode { PROGRESS_BAR, PROGRESS_LINES, PROGRESS_QUIET } progress_mode;

typedef struct progress_state {
  progress_mode mode;
  /* The run's own numbering: kiln train calls kiln_trainer_fit once per
   * epoch (to checkpoint between epochs), so the callback's are 1/1. */
  int64_t epoch;
  int64_t epochs;
} progress_state;

/* BAR when stdout is a terminal, else LINES; QUIET when quiet is set. */
progress_mode progress_choose_mode(int quiet);

/* With on = 1, makes SIGINT (Ctrl-C) ask the running fit to stop after the
 * current batch instead of killing the process mid-write (of a checkpoint,
 * say); on = 0 restores the default once training is over. */
void progress_catch_interrupt(int on);
int progress_interrupted(void);

/* A kiln_progress_fn; user is a progress_state. */
int progress_callback(void *user, const kiln_progress *progress);

#endif
