/* probe read PATH | write PATH | ls PATH | chmod PATH | cwd . : prints the content, "ok", names, or the errno name */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
static const char *name(int e) {
  switch (e) { case ENOENT: return "ENOENT"; case EACCES: return "EACCES"; case EROFS: return "EROFS";
  case EPERM: return "EPERM"; case ENOTDIR: return "ENOTDIR"; case ELOOP: return "ELOOP"; default: return strerror(e); }
}
int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *op = argv[i], *path = argv[i + 1];
    if (!strcmp(op, "read")) {
      int fd = open(path, O_RDONLY);
      if (fd < 0) { printf("%s\n", name(errno)); continue; }
      char buf[256]; ssize_t n = read(fd, buf, sizeof buf - 1);
      if (n < 0) { printf("%s\n", name(errno)); close(fd); continue; }
      buf[n] = 0; while (n > 0 && buf[n - 1] == '\n') buf[--n] = 0; printf("%s\n", buf); close(fd);
    } else if (!strcmp(op, "write")) {
      int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || write(fd, "x", 1) != 1) printf("%s\n", name(errno)); else printf("ok\n");
      if (fd >= 0) close(fd);
    } else if (!strcmp(op, "ls")) {
      DIR *d = opendir(path);
      if (!d) { printf("%s\n", name(errno)); continue; }
      struct dirent *e; int first = 1;
      while ((e = readdir(d))) { if (e->d_name[0] == '.') continue; printf("%s%s", first ? "" : " ", e->d_name); first = 0; }
      printf("\n"); closedir(d);
    } else if (!strcmp(op, "chmod")) {
      printf("%s\n", chmod(path, 0600) ? name(errno) : "ok");
    } else if (!strcmp(op, "cwd")) {
      char buf[256]; printf("%s\n", getcwd(buf, sizeof buf) ? buf : name(errno));
    }
  }
  return 0;
}
