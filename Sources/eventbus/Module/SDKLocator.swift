import Foundation

/// Finds the EventBusKit SDK package that modules must be built against: the one this CLI ships
/// with, because a module has to match the host's SDK and compiler exactly (docs/platform-facts.md, Loading modules).
///
/// In order: `--sdk PATH`; `$EVENTBUS_SDK`; then, from the folder of this executable (symlinks
/// resolved) upwards, the first `plugins/EventBusKit` (a source checkout, where the CLI runs from
/// `.build/…`) or `share/eventbus/EventBusKit` (an install: `PREFIX/bin/eventbus` with the SDK
/// in `PREFIX/share/eventbus/EventBusKit`).
enum SDKLocator {
    static let environmentVariable = "EVENTBUS_SDK"
    /// The SDK's library and target name, and its folder's name where the CLI looks for it.
    /// A copy elsewhere may be named anything: SwiftPM names a path dependency after its folder,
    /// and a module's manifest names it that way (``packageIdentity(of:)``).
    static let folderName = "EventBusKit"

    /// What a manifest's `.product(name:package:)` calls the SDK at `path`: SwiftPM's identity of
    /// a path dependency is its folder's name.
    static func packageIdentity(of path: String) -> String {
        URL(fileURLWithPath: path).standardizedFileURL.lastPathComponent
    }

    struct Location {
        var path: String
        /// How it was found, for messages: "from --sdk", "from $EVENTBUS_SDK", "next to …".
        var origin: String
    }

    static func locate(option: String?) throws -> Location {
        if let option {
            return try check(option, origin: "from --sdk")
        }
        if let variable = ProcessInfo.processInfo.environment[environmentVariable], !variable.isEmpty {
            return try check(variable, origin: "from $\(environmentVariable)")
        }
        let executable = URL(fileURLWithPath: try executablePath()).resolvingSymlinksInPath()
        var folder = executable.deletingLastPathComponent()
        while true {
            for candidate in ["plugins/\(folderName)", "share/eventbus/\(folderName)"] {
                let url = folder.appendingPathComponent(candidate)
                if isSDK(url.path) { return Location(path: url.standardizedFileURL.path, origin: "next to \(executable.path)") }
            }
            let parent = folder.deletingLastPathComponent()
            if parent.path == folder.path { break }
            folder = parent
        }
        throw CommandError("""
            cannot find the EventBusKit SDK: no plugins/\(folderName) or share/eventbus/\(folderName) \
            above \(executable.path); pass --sdk PATH or set \(environmentVariable)
            """)
    }

    private static func check(_ path: String, origin: String) throws -> Location {
        let url = URL(fileURLWithPath: path).standardizedFileURL
        guard isSDK(url.path) else {
            throw CommandError("\(url.path) (\(origin)) is not the EventBusKit SDK package: no Package.swift and Sources/\(folderName) in it")
        }
        return Location(path: url.path, origin: origin)
    }

    private static func isSDK(_ path: String) -> Bool {
        var isFolder: ObjCBool = false
        let files = FileManager.default
        return files.fileExists(atPath: path + "/Package.swift")
            && files.fileExists(atPath: path + "/Sources/\(folderName)", isDirectory: &isFolder) && isFolder.boolValue
    }

    /// The SDK as the host's build made it, ready to compile against: a module package that uses
    /// it compiles only its own sources (a second or two) instead of building the SDK and
    /// OpenCombine again in its own `.build` (about a minute).
    struct Prebuilt {
        /// Holds `EventBusKit.swiftmodule` and the OpenCombine modules it re-exports.
        var modules: String
        /// The module map of OpenCombine's C helpers, which its Swift modules import.
        var moduleMap: String
        /// Holds `libEventBusKit.so`, the library the host runs.
        var library: String
        var origin: String
    }

    /// Finds the prebuilt SDK next to this executable (symlinks resolved), in one of two layouts:
    /// an install (`lib/eventbus/sdk/Modules`, `lib/eventbus/sdk/include/COpenCombineHelpers`,
    /// with `libEventBusKit.so` in `lib/eventbus`), or the root package's build folder the CLI was
    /// built into (`Modules/`, `COpenCombineHelpers.build/`, `libEventBusKit.so`).
    static func locatePrebuilt() throws -> Prebuilt {
        let executable = URL(fileURLWithPath: try executablePath()).resolvingSymlinksInPath()
        let folder = executable.deletingLastPathComponent().path
        let layouts = [
            (modules: folder + "/sdk/Modules", moduleMap: folder + "/sdk/include/COpenCombineHelpers/module.modulemap"),
            (modules: folder + "/Modules", moduleMap: folder + "/COpenCombineHelpers.build/module.modulemap"),
        ]
        let files = FileManager.default
        for layout in layouts where files.fileExists(atPath: layout.modules + "/\(folderName).swiftmodule")
            && files.fileExists(atPath: layout.moduleMap) && files.fileExists(atPath: folder + "/lib\(folderName).so") {
            return Prebuilt(modules: layout.modules, moduleMap: layout.moduleMap, library: folder, origin: "next to \(executable.path)")
        }
        throw CommandError("""
            no prebuilt EventBusKit next to \(executable.path) (sdk/Modules/\(folderName).swiftmodule or \
            Modules/\(folderName).swiftmodule, and lib\(folderName).so); use --from-source to build the SDK from its sources
            """)
    }

    private static func executablePath() throws -> String {
        do {
            return try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        } catch {
            throw CommandError("cannot tell where this executable is (/proc/self/exe: \(error)); pass --sdk PATH or set \(environmentVariable)")
        }
    }
}
