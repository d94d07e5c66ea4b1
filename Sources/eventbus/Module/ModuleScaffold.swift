import ArgumentParser
import Foundation

/// A module's name as its author gives it (`disk-watch`), and the Swift names made from it.
struct ModuleName {
    /// Lowercase words of letters and digits joined by single dashes, starting with a letter: the
    /// form config keys and folder names take.
    let name: String
    /// CamelCase (`DiskWatch`): the Swift target, module and class name, and `libDiskWatch.so`.
    let target: String

    /// CamelCase names that would shadow a module the package imports or a Swift keyword type.
    static let reserved: Set<String> = [
        "Any", "Self", "Type", "Protocol", "Swift", "Foundation", "Dispatch", "Glibc", "Musl",
        "EventBusKit", "OpenCombine", "OpenCombineDispatch", "OpenCombineFoundation",
    ]

    init(_ name: String) throws {
        let words = name.split(separator: "-", omittingEmptySubsequences: false)
        let valid = words.allSatisfy { word in
            !word.isEmpty && word.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) }
        } && name.first.map { ("a"..."z").contains($0) } == true
        guard valid else {
            throw ValidationError("""
                invalid module name "\(name)": use lowercase letters and digits, words joined by single \
                dashes, starting with a letter (e.g. disk-watch)
                """)
        }
        let target = words.map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
        guard !ModuleName.reserved.contains(target) else {
            throw ValidationError("invalid module name \"\(name)\": its Swift name \(target) would clash with \(target) in Swift or the SDK")
        }
        self.name = name
        self.target = target
    }
}

/// The files of a new module package. What it writes builds as is and loads into the host.
struct ModuleScaffold {
    /// What the package builds against.
    enum SDK {
        /// The host's SDK as built (``SDKLocator/Prebuilt``): only the module's sources compile.
        case prebuilt(SDKLocator.Prebuilt)
        /// The SDK package's sources, as a path dependency: the first build compiles the SDK and
        /// OpenCombine into the module's own `.build` too.
        case source(String)

        var description: String {
            switch self {
            case .prebuilt(let sdk): return "the prebuilt SDK in \(sdk.modules)"
            case .source(let path): return "the SDK sources at \(path)"
            }
        }
    }

    let name: ModuleName
    let sdk: SDK

    /// Creates `parent/NAME` with the package in it and returns its absolute path; `parent` is
    /// created when missing (as `mkdir -p`). Refuses a folder that exists, so it never
    /// overwrites anyone's work.
    func write(into parent: String) throws -> String {
        let files = FileManager.default
        let folder = try Self.makeFolder(name.name, in: parent)
        let contents: [(String, String)] = [
            ("Package.swift", packageManifest),
            ("Sources/\(name.target)/\(name.target).swift", moduleSource),
            ("README.md", readme),
            ("sample.yaml", sampleConfig(folder: folder.path)),
            (".gitignore", ".build/\n.swiftpm/\nPackage.resolved\n"),
        ]
        for (path, text) in contents {
            let url = folder.appendingPathComponent(path)
            try files.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(text.utf8).write(to: url)
        }
        return folder.path
    }

    /// Creates `parent/name` — `parent` as `mkdir -p` would — and returns it. Refuses a folder
    /// that exists, so a scaffold never overwrites anyone's work.
    static func makeFolder(_ name: String, in parent: String) throws -> URL {
        let files = FileManager.default
        let parentURL = URL(fileURLWithPath: parent).standardizedFileURL
        var isFolder: ObjCBool = false
        if !files.fileExists(atPath: parentURL.path, isDirectory: &isFolder) {
            do {
                try files.createDirectory(at: parentURL, withIntermediateDirectories: true)
            } catch {
                throw CommandError("cannot create \(parentURL.path): \(error.localizedDescription)")
            }
        } else if !isFolder.boolValue {
            throw CommandError("\(parentURL.path) is not a folder")
        }
        let folder = parentURL.appendingPathComponent(name)
        guard !files.fileExists(atPath: folder.path) else {
            throw CommandError("\(folder.path) already exists; choose another name or --path")
        }
        do {
            try files.createDirectory(at: folder, withIntermediateDirectories: false)
        } catch {
            throw CommandError("cannot create \(folder.path): \(error.localizedDescription)")
        }
        return folder
    }

    var packageManifest: String {
        switch sdk {
        case .prebuilt(let prebuilt): return prebuiltManifest(prebuilt)
        case .source(let path): return sourceManifest(path)
        }
    }

    /// Compiles against the host's prebuilt SDK. `unsafeFlags` are allowed in a root package,
    /// which this is (a package that depends on it by path would refuse them).
    private func prebuiltManifest(_ sdk: SDKLocator.Prebuilt) -> String {
        """
        // swift-tools-version:6.0
        // An EventBus handler module, built against the prebuilt SDK of the host that will load it
        // (a module must be built with that host's SDK and compiler): only this package's sources
        // compile. Rebuild after the host is upgraded. `eventbus module new --from-source` writes
        // a manifest that builds the SDK from its sources instead.
        import PackageDescription

        /// `eventbus module sdk-path --prebuilt` prints these.
        let sdkModules = \(swiftLiteral(sdk.modules))
        let sdkModuleMap = \(swiftLiteral(sdk.moduleMap))
        let sdkLibrary = \(swiftLiteral(sdk.library))

        let package = Package(
            name: \(swiftLiteral(name.name)),
            products: [
                .library(name: \(swiftLiteral(name.target)), type: .dynamic, targets: [\(swiftLiteral(name.target))]),
            ],
            targets: [
                .target(
                    name: \(swiftLiteral(name.target)),
                    swiftSettings: [.unsafeFlags(["-I", sdkModules, "-Xcc", "-fmodule-map-file=" + sdkModuleMap])],
                    // Links the host's one libEventBusKit.so dynamically (never a copy of its own).
                    linkerSettings: [.unsafeFlags(["-L", sdkLibrary, "-lEventBusKit"])]
                ),
            ]
        )

        """
    }

    private func sourceManifest(_ sdkPath: String) -> String {
        """
        // swift-tools-version:6.0
        // An EventBus handler module. It depends on the SDK of the host that will load it (a module
        // must be built with that host's SDK and compiler), and on nothing that the SDK re-exports.
        // The first build compiles the SDK too (about a minute).
        import PackageDescription

        let package = Package(
            name: \(swiftLiteral(name.name)),
            products: [
                .library(name: \(swiftLiteral(name.target)), type: .dynamic, targets: [\(swiftLiteral(name.target))]),
            ],
            dependencies: [
                .package(path: \(swiftLiteral(sdkPath))),
            ],
            targets: [
                .target(
                    name: \(swiftLiteral(name.target)),
                    dependencies: [.product(name: "EventBusKit", package: \(swiftLiteral(SDKLocator.packageIdentity(of: sdkPath))))]
                ),
            ]
        )

        """
    }

    var moduleSource: String {
        """
        import EventBusKit

        /// The \(name.name) module. `activate` runs on the module's own serial queue, where all of
        /// its subscriptions deliver too, so its code never runs concurrently with itself.
        final class \(name.target): EventBusModule {
            let name = \(swiftLiteral(name.name))
            let version = "0.1.0"
            /// The keys of its config section. The host refuses a section with any other key, a
            /// value of the wrong type or a missing required key, naming file, line and key.
            static let configKeys: ModuleConfigKeys = [
                .string("subscribe", default: "user.>", help: "the events to log (NATS-style pattern)"),
            ]

            func activate(_ context: ModuleContext) throws {
                let pattern = try context.config.string("subscribe")  // its declared default if left out
                try context.bus.publisher(for: pattern)
                    .handle(in: context) { event in
                        context.log.info("\\(event.name) #\\(event.sequence) from \\(event.source)")
                    }
            }
        }

        @_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(\(name.target).init) }

        """
    }

    var readme: String {
        """
        # \(name.name)

        An EventBus handler module. It logs every event matching `subscribe`.

        ## Config keys

        | key | default | meaning |
        |---|---|---|
        | `subscribe` | `user.>` | the events to log (NATS-style pattern: `*` one token, `>` the rest) |

        ## Build and load

        ```sh
        swift build -c release
        ```

        builds `.build/release/lib\(name.target).so` against \(sdk.description) — the SDK
        of the host that loads it; rebuild after that host is upgraded. The keys it reads are
        declared in `configKeys`; the host checks its section against them. Add the entry in
        `sample.yaml` to the `modules:` of the host's config (the keys above go under `config:`)
        and reload (`eventbus reload`) or restart the host. `eventbusd --check-config` says whether it
        loads: a module built against any other SDK (the library carries a fingerprint of the
        SDK's sources) or compiler, or that depends on OpenCombine directly, is refused with the
        reason.

        """
    }

    func sampleConfig(folder: String) -> String {
        """
        # This module's entry in the host's config (relative paths resolve against the config
        # file's folder). `swift build -c release` makes the library.
        modules:
          \(name.name):
            path: \(folder)/.build/release/lib\(name.target).so
            config:
              subscribe: "user.>"

        """
    }

    /// `text` as a Swift string literal, for the generated manifest.
    private func swiftLiteral(_ text: String) -> String {
        var escaped = ""
        for character in text {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            default: escaped.append(character)
            }
        }
        return "\"" + escaped + "\""
    }
}
