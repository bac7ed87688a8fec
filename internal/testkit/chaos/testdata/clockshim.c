// clockshim is an LD_PRELOAD library that runs one process's wall clock
// ahead of (or behind) the real one, and nothing else: clock_gettime of
// CLOCK_REALTIME and CLOCK_REALTIME_COARSE, gettimeofday and time return
// the real time plus a signed number of whole seconds read from the file
// that CLOCKSHIM_OFFSET_FILE names ("+20" or "-10"; no file or no number
// means 0). The file is read on every call, so replacing it (write a new
// file, rename it over the old one) steps the clock at once. That costs
// three system calls a reading, about 4 µs on a loaded 2-core machine;
// valkey-server reads the wall clock about four times a command, which a
// fault row's few hundred requests a second do not notice. Every other
// clock, the monotonic one among them, is read as it is: an NTP step
// leaves it alone too.
//
// It stands in for libfaketime, which aborts inside Debian's
// valkey-server, linked with jemalloc ("Unexpected recursive calls to
// clock_gettime()": its clock_gettime is entered again while it is still
// setting itself up). This shim sets nothing up but the address of the
// real clock_gettime, looked up with dlsym on first use, and allocates
// nothing and uses no stdio: the file is read with open, read and close
// into a buffer on the stack, and gettimeofday and time are computed from
// clock_gettime. A call that arrives while the lookup runs (in another
// thread, or from inside dlsym, should dlsym allocate and the allocator
// read the clock) asks the kernel directly.
//
// The chaos tests build it: cc -shared -fPIC -O2 -o clockshim.so clockshim.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int clock_gettime_fn(clockid_t, struct timespec *);

static clock_gettime_fn *real_clock_gettime;
static int looking_up;

// real_time reads clock id, unshifted.
static int real_time(clockid_t id, struct timespec *ts) {
	clock_gettime_fn *f = __atomic_load_n(&real_clock_gettime, __ATOMIC_ACQUIRE);
	if (f == NULL && !__atomic_exchange_n(&looking_up, 1, __ATOMIC_ACQ_REL)) {
		f = (clock_gettime_fn *)dlsym(RTLD_NEXT, "clock_gettime");
		__atomic_store_n(&real_clock_gettime, f, __ATOMIC_RELEASE);
	}
	if (f == NULL) // being looked up, here or in another thread, or not found
		return (int)syscall(SYS_clock_gettime, id, ts);
	return f(id, ts);
}

// offset returns the offset in seconds that the file holds.
static long offset(void) {
	const char *path = getenv("CLOCKSHIM_OFFSET_FILE");
	if (path == NULL)
		return 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	char buf[32];
	ssize_t n = read(fd, buf, sizeof buf);
	close(fd);
	long v = 0, sign = 1;
	ssize_t i = 0;
	if (i < n && (buf[i] == '+' || buf[i] == '-'))
		sign = buf[i++] == '-' ? -1 : 1;
	for (; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
		v = v * 10 + (buf[i] - '0');
	return sign * v;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	int r = real_time(id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
		ts->tv_sec += offset();
	return r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return -1;
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	if (tz != NULL) // obsolete; glibc zeroes it too
		((struct timezone *)tz)->tz_minuteswest = ((struct timezone *)tz)->tz_dsttime = 0;
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return (time_t)-1;
	if (t != NULL)
		*t = ts.tv_sec;
	return ts.tv_sec;
}
