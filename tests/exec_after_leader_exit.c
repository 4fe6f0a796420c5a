/* A thread execs after the process's first thread has ended (pthread_exit): the
 * leader is a zombie, which ptrace cannot attach to, and the exec takes its place
 * (the thread's id becomes the process's). */
#include <pthread.h>
#include <unistd.h>

static void *exec_later(void *arg) {
    (void)arg;
    usleep(200000); /* the first thread has ended by now */
    char *argv[] = {"/bin/echo", "ran", 0};
    execv(argv[0], argv);
    return 0;
}

int main(void) {
    pthread_t thread;
    pthread_create(&thread, 0, exec_later, 0);
    pthread_exit(0);
}
