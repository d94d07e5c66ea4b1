// malloc_trim, which Swift's Glibc module does not export: the control socket gives freed
// heap back to the kernel after large buffers were let go of (see HeapTrim).
#include <malloc.h>
