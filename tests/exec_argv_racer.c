/* The argv race of an exec check (test_policy_fn): a second thread rewrites the
   argument back and forth while the main thread execs "/bin/echo <arg>". The check
   may see "good" or "EVIL"; what runs must be what it saw.
   racer ROUNDS data|heap|shared: where the argument lives (the program's .data,
   malloc'd memory, or a shared mapping another process writes). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static char in_data[8] = "good";
static char *arg;
static volatile int racing = 1;

static void *race(void *unused) {
    volatile char *target = arg;  /* every store happens, none is optimised away */
    (void)unused;
    while (racing) {
        for (int i = 0; i < 4; i++) target[i] = "EVIL"[i];
        for (int i = 0; i < 4; i++) target[i] = "good"[i];
    }
    return NULL;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    const char *where = argc > 2 ? argv[2] : "data";
    for (int i = 0; i < rounds; i++) {
        pid_t writer = 0;
        if (strcmp(where, "shared") == 0) {
            arg = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
            strcpy(arg, "good");
            writer = fork();
            if (writer == 0) {  /* another process, writing the shared page */
                race(NULL);
                _exit(0);
            }
        } else {
            arg = strcmp(where, "heap") == 0 ? strdup("good") : in_data;
        }
        pid_t pid = fork();
        if (pid == 0) {
            pthread_t thread;
            if (!writer)
                pthread_create(&thread, NULL, race, NULL);
            usleep(200);
            char *args[] = {"/bin/echo", arg, NULL};
            execv("/bin/echo", args);
            _exit(127);
        }
        waitpid(pid, NULL, 0);
        if (writer) {
            kill(writer, 9);
            waitpid(writer, NULL, 0);
            munmap(arg, 4096);
        }
    }
    return 0;
}
