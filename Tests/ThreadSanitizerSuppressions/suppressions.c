// The reports ThreadSanitizer is told to ignore in the test binaries, read by its runtime when it
// starts (under `swift test --sanitize=thread`; without the sanitizer nothing calls it). Written
// in C, uninstrumented, because the sanitizer calls it before it or the Swift runtime is set up.
//
// One known false positive (swiftlang/swift#57803, still seen with Swift 6.2 and 6.3): a task
// that parks an UnsafeContinuation and another thread that resumes it at once race, in the
// sanitizer's eyes, on a word of the awaiting task's context, because the runtime's own
// synchronisation of that hand-over is not instrumented. The patterns name only the resumption of
// `withUnsafeThrowingContinuation` and `withUnsafeContinuation` (their `TY0_` partial functions),
// so a race in the closure that parks the continuation, or anywhere else, is still reported.
//
// The same hand-over through a CheckedContinuation shows from the resuming side: swift-nio's
// `EventLoopFuture.get()`, which PostgresNIO awaits, resumes one from an event loop thread, and the
// sanitizer pairs that `resume` (`$sScc6resume…`) with the awaiting task's next write, in whatever
// function it awaited from. The pattern names the resume functions themselves, which call no code
// of ours, so only accesses made inside them are ignored.

#include "ThreadSanitizerSuppressions.h"

__attribute__((no_sanitize("thread")))
const char *__tsan_default_suppressions(void) {
    return "race:ss30withUnsafeThrowingContinuation*TY0_\n"
           "race:ss23withUnsafeContinuation*TY0_\n"
           "race:Scc6resume\n";
}
