/* Reads the realtime clock the three ways a program can (the vDSO serves all three
   unless sandlock made it enter the kernel): clock_gettime, gettimeofday, time. */
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

int main(void) {
    struct timespec now;
    struct timeval tv;
    clock_gettime(CLOCK_REALTIME, &now);
    gettimeofday(&tv, NULL);
    printf("%ld %ld %ld\n", (long)now.tv_sec, (long)tv.tv_sec, (long)time(NULL));
    return 0;
}
