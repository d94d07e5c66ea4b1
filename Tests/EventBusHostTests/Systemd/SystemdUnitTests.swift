import Foundation
import Testing

/// The example units in examples/ pass `systemd-analyze verify` (which works without systemd
/// as PID 1). Their ExecStart= names the installed binary; the test points it at the built one,
/// since verify checks that the program exists.
@Suite struct SystemdUnitTests {
    static let analyzer = "/usr/bin/systemd-analyze"

    /// The repository root, from this file's path.
    static let examples = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("examples").path

    /// Runs `systemd-analyze verify` on `units` (file names in `directory`); its exit status
    /// and everything it printed. verify exits 0 even for settings it ignores (an unknown
    /// `Type=` is only a warning), so the output must be empty too.
    private static func verify(_ units: [String], in directory: String) throws -> (status: Int32, output: String) {
        let tool = Process()
        tool.executableURL = URL(fileURLWithPath: analyzer)
        tool.arguments = ["verify"] + units.map { directory + "/" + $0 }
        tool.currentDirectoryURL = URL(fileURLWithPath: directory)
        let pipe = Pipe()
        tool.standardOutput = pipe
        tool.standardError = pipe
        try tool.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        tool.waitUntilExit()
        return (tool.terminationStatus, output)
    }

    private static func copyUnits(to directory: TemporaryDirectory, editing edit: (String) -> String = { $0 }) throws {
        for unit in ["eventbusd.service", "eventbusd.socket"] {
            let text = try String(contentsOfFile: examples + "/" + unit, encoding: .utf8)
            try directory.write(unit, edit(text.replacing("/usr/local/bin/eventbusd", with: BuildProducts.eventbusd)
                .replacing("/usr/local/bin/eventbus ", with: BuildProducts.directory + "/eventbus ")))
        }
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: analyzer)))
    func exampleUnitsVerifyCleanly() throws {
        let directory = try TemporaryDirectory()
        try Self.copyUnits(to: directory)
        let result = try Self.verify(["eventbusd.service", "eventbusd.socket"], in: directory.path)
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.isEmpty, "\(result.output)")
    }

    /// The check above is only worth something if verify does complain here: a unit with a
    /// setting this systemd does not know (notify-reload is systemd ≥ 253) must produce output.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: analyzer)))
    func verifyReportsAProblemItIsShown() throws {
        let directory = try TemporaryDirectory()
        try Self.copyUnits(to: directory) { $0.replacing("Type=notify\n", with: "Type=no-such-type\n") }
        let result = try Self.verify(["eventbusd.service", "eventbusd.socket"], in: directory.path)
        #expect(result.output.contains("no-such-type"), "\(result.output)")
    }
}
