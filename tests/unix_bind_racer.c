/* The pathname-bind race (test_unix_bind_race): one thread binds a unix socket to a
   path, over and over; another turns the call into an IP bind meanwhile, by writing a
   sockaddr_in 127.0.0.1:PORT over the sockaddr the call points to, and (mode "dup2")
   by dup2()ing a UDP socket over the descriptor number the call names. A supervisor
   that judged the unix bind and let the kernel proceed would have the kernel read the
   IP address and descriptor instead: a UDP port bound that no rule allowed.

   racer PORT SECONDS mem|dup2 DIR: bound and received are said on stdout. Once the UDP
   socket holds PORT, the racer stops, says "bound ADDRESS", waits up to a second for a
   datagram sent to the port from outside ("received ..."), and holds the port 0.2 s
   more. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define TARGET_FD 100  /* the descriptor number the bind names */

static union {
    struct sockaddr_un un;
    struct sockaddr_in in;
    char raw[sizeof(struct sockaddr_un)];
} address;
static struct sockaddr_un as_unix;
static struct sockaddr_in as_inet;
static volatile int racing = 1;
static int dup_mode;
static int udp = -1, unix_socket = -1;

static void *flip(void *unused) {
    volatile char *target = address.raw;
    (void)unused;
    while (racing) {
        if (dup_mode) dup2(udp, TARGET_FD);
        for (size_t i = 0; i < sizeof as_inet; i++) target[i] = ((char *)&as_inet)[i];
        if (dup_mode) dup2(unix_socket, TARGET_FD);
        for (size_t i = 0; i < sizeof as_unix; i++) target[i] = ((char *)&as_unix)[i];
    }
    return NULL;
}

static int holds_port(int fd, int port) {
    struct sockaddr_in name;
    socklen_t length = sizeof name;
    if (getsockname(fd, (struct sockaddr *)&name, &length) != 0) return 0;
    return name.sin_family == AF_INET && ntohs(name.sin_port) == port;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: racer PORT SECONDS mem|dup2 DIR\n");
        return 2;
    }
    int port = atoi(argv[1]);
    double seconds = atof(argv[2]);
    dup_mode = strcmp(argv[3], "dup2") == 0;
    as_unix.sun_family = AF_UNIX;
    snprintf(as_unix.sun_path, sizeof as_unix.sun_path, "%s/racer.sock", argv[4]);
    as_inet.sin_family = AF_INET;
    as_inet.sin_port = htons(port);
    as_inet.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    memcpy(&address, &as_unix, sizeof as_unix);
    udp = socket(AF_INET, SOCK_DGRAM, 0);
    unix_socket = socket(AF_UNIX, SOCK_STREAM, 0);
    if (udp < 0 || unix_socket < 0 || dup2(dup_mode ? unix_socket : udp, TARGET_FD) < 0) {
        perror("racer: socket");
        return 2;
    }
    pthread_t flipper;
    pthread_create(&flipper, NULL, flip, NULL);
    long attempts = 0, unix_bound = 0;
    int bound = 0;
    double end = now() + seconds;
    while (!bound && now() < end) {
        attempts++;
        if (bind(TARGET_FD, (struct sockaddr *)&address, sizeof address.un) == 0) {
            if (holds_port(udp, port)) {
                bound = 1;
            } else if (dup_mode) {  /* the unix socket was bound: a fresh one */
                unix_bound++;
                unlink(as_unix.sun_path);
                int fresh = socket(AF_UNIX, SOCK_STREAM, 0);
                dup2(fresh, unix_socket);
                close(fresh);
            }
        }
        if (holds_port(udp, port)) bound = 1;
    }
    racing = 0;
    pthread_join(flipper, NULL);
    printf("attempts %ld unix-binds %ld\n", attempts, unix_bound);
    if (!bound) return 0;
    struct sockaddr_in name;
    socklen_t length = sizeof name;
    getsockname(udp, (struct sockaddr *)&name, &length);
    printf("bound %s\n", inet_ntoa(name.sin_addr));  /* a torn read may give 127.0.0.x */
    fflush(stdout);
    struct pollfd ready = {udp, POLLIN, 0};
    if (poll(&ready, 1, 1000) == 1) {
        char data[64] = {0};
        ssize_t got = recv(udp, data, sizeof data - 1, 0);
        if (got > 0) printf("received %s\n", data);
    }
    usleep(200000);  /* the port held a while longer: the outside sees it taken */
    return 0;
}
