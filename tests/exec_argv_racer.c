/* The argv race of an exec check (test_policy_fn): a second thread rewrites the
   argument back and forth while the main thread execs "/bin/echo <arg>". The check
   may see "good" or "EVIL"; what runs must be what it saw.
   racer ROUNDS data|heap|shared|vm|procmem: where the argument lives and who writes it
   (a thread, in the program's .data or malloc'd memory; another process through a
   shared mapping; a process sharing the whole address space, made by clone(CLONE_VM);
   the parent, through the exec'ing child's /proc/PID/mem). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
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
static char vm_stack[65536];

static int race_in_process(void *parent) {
    volatile char *target = arg;
    /* Until the process it shared memory with has exec'd and ended. */
    for (unsigned n = 1; n % 4096 || getppid() == (pid_t)(long)parent; n++) {
        for (int i = 0; i < 4; i++) target[i] = "EVIL"[i];
        for (int i = 0; i < 4; i++) target[i] = "good"[i];
    }
    return 0;
}

static void *race(void *unused) {
    volatile char *target = arg;  /* every store happens, none is optimised away */
    (void)unused;
    while (racing) {
        for (int i = 0; i < 4; i++) target[i] = "EVIL"[i];
        for (int i = 0; i < 4; i++) target[i] = "good"[i];
    }
    return NULL;
}

/* As its parent (Yama's ptrace_scope 1 lets an ancestor write a process's memory):
   until the child has exec'd and ended. */
static void race_through_proc(pid_t child) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/mem", (int)child);
    int fd = open(path, O_RDWR);
    if (fd < 0 && (errno == ESRCH || errno == ENOENT))
        return;  /* it exec'd and ended before we got here (a loaded machine): no race this round */
    if (fd < 0) {
        perror("racer: /proc/PID/mem");
        exit(2);
    }
    while (waitpid(child, NULL, WNOHANG) == 0) {
        pwrite(fd, "EVIL", 4, (off_t)(unsigned long)arg);
        pwrite(fd, "good", 4, (off_t)(unsigned long)arg);
    }
    close(fd);
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
            arg = strcmp(where, "heap") == 0 || strcmp(where, "procmem") == 0 ? strdup("good") : in_data;
        }
        pid_t pid = fork();
        if (pid == 0) {
            pthread_t thread;
            if (strcmp(where, "vm") == 0)  /* a process, not a thread, in this memory */
                clone(race_in_process, vm_stack + sizeof vm_stack, CLONE_VM | SIGCHLD,
                      (void *)(long)getpid());
            else if (!writer && strcmp(where, "procmem") != 0)
                pthread_create(&thread, NULL, race, NULL);
            usleep(200);
            /* (the literal lies in the program's file: procmem wants every byte in
               private anonymous memory, as a thread alone could write it) */
            char *echo = strdup("/bin/echo");
            char *args[] = {echo, arg, NULL};
            execv(echo, args);
            fprintf(stderr, "racer: round %d: execv: %s\n", i, strerror(errno));
            _exit(127);
        }
        if (strcmp(where, "procmem") == 0)
            race_through_proc(pid);
        waitpid(pid, NULL, 0);
        if (writer) {
            kill(writer, 9);
            waitpid(writer, NULL, 0);
            munmap(arg, 4096);
        }
    }
    return 0;
}
