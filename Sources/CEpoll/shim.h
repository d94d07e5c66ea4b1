// epoll and eventfd, which Swift's Glibc module does not export: the control socket's event
// loop (one thread for every client connection) is built on them.
#include <sys/epoll.h>
#include <sys/eventfd.h>
