/*
 * Runs a fuzz harness's LLVMFuzzerTestOneInput on files instead of under
 * libFuzzer, so any C compiler can replay the seed corpora in CTest:
 *   replay_NAME FILE_OR_DIRECTORY...
 * Every regular file named, or found directly in a named directory, is one
 * input. Fails when an argument cannot be read or no input was found (an
 * empty corpus would otherwise pass silently); a bad input aborts in the
 * harness.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return 0;
  }
  uint8_t *data = NULL;
  size_t size = 0, capacity = 0, got;
  do {
    if (size == capacity) {
      capacity = capacity ? 2 * capacity : 4096;
      data = realloc(data, capacity);
      if (!data) {
        fprintf(stderr, "%s: out of memory\n", path);
        exit(1);
      }
    }
    got = fread(data + size, 1, capacity - size, f);
    size += got;
  } while (got > 0);
  int ok = !ferror(f);
  fclose(f);
  if (!ok) {
    fprintf(stderr, "%s: read error\n", path);
  } else {
    printf("replaying %s (%zu bytes)\n", path, size);
    fflush(stdout);
    LLVMFuzzerTestOneInput(data, size);
  }
  free(data);
  return ok;
}

int main(int argc, char **argv) {
  int inputs = 0, errors = 0;
  for (int i = 1; i < argc; ++i) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      perror(argv[i]);
      ++errors;
    } else if (S_ISDIR(st.st_mode)) {
      DIR *dir = opendir(argv[i]);
      if (!dir) {
        perror(argv[i]);
        ++errors;
        continue;
      }
      for (struct dirent *e; (e = readdir(dir));) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (run_file(path)) ++inputs; else ++errors;
      }
      closedir(dir);
    } else if (run_file(argv[i])) {
      ++inputs;
    } else {
      ++errors;
    }
  }
  printf("%d inputs replayed, %d errors\n", inputs, errors);
  if (inputs == 0) fprintf(stderr, "no inputs found in the arguments\n");
  return errors == 0 && inputs > 0 ? 0 : 1;
}
