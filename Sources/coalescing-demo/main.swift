import Foundation

// Plays an app launch against a local HTTP server and prints what coalescing saves.
// Everything is called back on queues of the demo's own: a command-line program does not service
// `OperationQueue.main` unless its main thread runs the run loop.

let options: DemoOptions
do {
    options = try DemoOptions(arguments: Array(CommandLine.arguments.dropFirst()))
} catch let error as DemoOptions.UsageError {
    if !error.description.isEmpty {
        FileHandle.standardError.write(Data("coalescing-demo: \(error.description)\n\n".utf8))
    }
    print(DemoOptions.usage)
    exit(error.description.isEmpty ? 0 : 64)
}

do {
    try await LaunchScript(options: options).run()
} catch {
    FileHandle.standardError.write(Data("coalescing-demo: \(error)\n".utf8))
    exit(1)
}
