import Dispatch
import Foundation

public struct ProcessResult: Sendable {
    public var status: Int32
    /// Standard output and error, interleaved as written.
    public var output: String
    public var seconds: Double
}

/// Runs a program to its end (shared by the module-package builds of EventBusModulesTests and the
/// changed-SDK build of EventBusHostTests). The waiting happens on a Dispatch thread, not on one of Swift
/// concurrency's few cooperative threads, so a minute-long `swift build` does not starve the
/// tests running beside it.
public func run(_ program: String, _ arguments: [String], environment: [String: String]? = nil) async throws -> ProcessResult {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async {
            continuation.resume(with: Result { try runBlocking(program, arguments, environment: environment) })
        }
    }
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
