import Foundation
import Testing

/// `Merge` … `Merge8` and `CombineLatest` … `CombineLatest4` are generated from one rule each by
/// plugins/EventBusKit/Scripts/GenerateArityFamilies.swift. This holds the checked-in files to
/// that script, so a hand edit to one arity (which the others would silently lack) fails here.
@Suite struct ArityFamiliesTests {
    @Test(.timeLimit(.minutes(5)))
    func generatedFamiliesMatchTheirScript() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["swift", root.appendingPathComponent("plugins/EventBusKit/Scripts/GenerateArityFamilies.swift").path,
                             "--check"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationReason == .exit && process.terminationStatus == 0, "\(output)")
    }
}
