import Foundation

/// Executables the package builds next to the test bundle (`.build*/<triple>/<config>/`), found
/// from the running test executable — for tests that run a fixture as a child process.
public enum BuiltExecutable {
    /// The path of the built product `name`, or nil when it has not been built
    /// (`swift build --build-tests` builds every product).
    public static func path(named name: String) -> String? {
        var candidates: [String] = []
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            candidates.append((exe as NSString).deletingLastPathComponent)
        }
        candidates.append(Bundle.main.bundlePath)
        for directory in candidates {
            var current = directory
            for _ in 0..<4 {
                if access(current + "/" + name, X_OK) == 0 { return current + "/" + name }
                current = (current as NSString).deletingLastPathComponent
            }
        }
        return nil
    }
}
