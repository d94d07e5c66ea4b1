import Foundation
@testable import ModuleIsolation
import Testing

/// Which backtracer a worker's Swift runtime is told to use: the one installed beside the
/// worker (a package ships it there), else the toolchain's; with neither, none — rather than a
/// runtime that logs "unable to locate swift-backtrace" at every worker start.
@Suite struct WorkerBacktraceSettingTests {
    @Test func aBacktracerBesideTheWorkerIsNamedExplicitly() throws {
        let directory = try TemporaryDirectory()
        let backtracer = try directory.write("swift-backtrace", "#!/bin/sh\n")
        chmod(backtracer, 0o755)
        #expect(WorkerProcess.crashBacktraceSetting(workerDirectory: directory.path, runtimeBacktracer: nil)
            == WorkerProcess.crashBacktrace + ",swift-backtrace=" + backtracer)
    }

    @Test func theToolchainsBacktracerIsFoundByTheRuntimeItself() throws {
        let directory = try TemporaryDirectory()
        let runtime = try #require(WorkerProcess.runtimeBacktracer)
        #expect(FileManager.default.isExecutableFile(atPath: runtime), "this test runs on the toolchain's runtime: \(runtime)")
        #expect(WorkerProcess.crashBacktraceSetting(workerDirectory: directory.path, runtimeBacktracer: runtime) == WorkerProcess.crashBacktrace)
    }

    @Test func withNoBacktracerBacktracesAreOff() throws {
        let directory = try TemporaryDirectory()
        #expect(WorkerProcess.crashBacktraceSetting(workerDirectory: directory.path, runtimeBacktracer: directory.path + "/missing")
            == "SWIFT_BACKTRACE=enable=no")
    }
}
