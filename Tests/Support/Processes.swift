import Foundation

public struct ProcessResult: Sendable {
    public var status: Int32
    /// Standard output and error, interleaved as written.
    public var output: String
    public var seconds: Double
}

/// Runs `body` — work that blocks: a child process, a socket read loop — on a thread of its own
/// and waits for it there, not on one of Swift concurrency's cooperative threads. Swift Testing runs
/// every test on those, two on a 2-core machine: a test blocking one for a minute (a `swift
/// build`, a debootstrap, a poster that runs until the host stops) stalls the tests beside it,
/// and with both taken, every `eventually` in the run waits — the run stalled ~60 s and tests
/// whose own waits ran out failed.
public func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        // A thread of its own, not Dispatch's global queue: on Linux that starts about as many
        // threads as there are cores and adds about one a second while they block, so a quick
        // call queued behind the suite's `swift build`s and debootstraps for minutes.
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}

/// Runs a program to its end (shared by the module-package builds of EventBusModulesTests, the
/// changed-SDK build and the Debian package test of EventBusHostTests), off the cooperative
/// threads (``blocking(_:)``).
public func run(_ program: String, _ arguments: [String], environment: [String: String]? = nil) async throws -> ProcessResult {
    try await blocking { try runBlocking(program, arguments, environment: environment) }
}

private func runBlocking(_ program: String, _ arguments: [String], environment: [String: String]?) throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: program)
    process.arguments = arguments
    if let environment { process.environment = environment }
    // One pipe for both streams: reading two pipes one after the other can deadlock when the
    // unread one fills.
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    process.standardInput = FileHandle.nullDevice
    let start = ContinuousClock.now
    try process.run()
    let output = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let elapsed = ContinuousClock.now - start
    return ProcessResult(status: process.terminationStatus, output: String(decoding: output, as: UTF8.self),
                         seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
}

/// `swift` from the `PATH` the tests run with, as a module author would call it.
public func swiftExecutable() throws -> String {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin"
    for folder in path.split(separator: ":") where FileManager.default.isExecutableFile(atPath: "\(folder)/swift") {
        return "\(folder)/swift"
    }
    throw MissingProgram(description: "no swift on PATH (\(path))")
}

/// A program a test needs is not installed.
public struct MissingProgram: Error, CustomStringConvertible {
    public var description: String
}
