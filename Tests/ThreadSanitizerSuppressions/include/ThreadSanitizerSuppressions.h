// See suppressions.c: what ThreadSanitizer ignores in the test binaries, and why.
const char *__tsan_default_suppressions(void);
