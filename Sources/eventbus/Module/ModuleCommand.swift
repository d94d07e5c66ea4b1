import ArgumentParser

/// `eventbus module …`: for authors of handler modules.
struct ModuleCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "module",
        abstract: "Create handler modules and find the SDK they build against.",
        subcommands: [NewModule.self, SDKPath.self]
    )
}

/// Where the SDK is: the option shared by the subcommands that need it.
struct SDKOptions: ParsableArguments {
    @Option(name: .customLong("sdk"),
            help: ArgumentHelp("The EventBusKit SDK package folder (default: $\(SDKLocator.environmentVariable), else found next to this executable).",
                               valueName: "path"))
    var path: String?

    func locate() throws -> SDKLocator.Location {
        try SDKLocator.locate(option: path)
    }
}

/// `eventbus module sdk-path`: prints the SDK folder, for a module package's `.package(path:)`.
struct SDKPath: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sdk-path",
        abstract: "Print the folder of the EventBusKit SDK package that modules must build against."
    )

    @OptionGroup var sdk: SDKOptions

    @Flag(name: .customLong("prebuilt"), help: "Print the prebuilt SDK instead: its modules folder, module map and library folder.")
    var prebuilt = false

    func run() throws {
        guard prebuilt else {
            print(try sdk.locate().path)
            return
        }
        let found = try SDKLocator.locatePrebuilt()
        print("modules: \(found.modules)\nmodule map: \(found.moduleMap)\nlibrary: \(found.library)")
    }
}

/// `eventbus module new NAME`: scaffolds a module package that builds against this SDK, or
/// (`--lang python`) an exec module in Python.
struct NewModule: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "new",
        abstract: "Create a module: a Swift package (Package.swift, a working module, README.md, sample.yaml), or with --lang python a Python program that runs as is.",
        discussion: """
            NAME is lowercase words joined by dashes (e.g. disk-watch); its Swift target is the \
            CamelCase form (DiskWatch). The package is created in DIR/NAME, which must not exist \
            (DIR is created when missing). It builds against the prebuilt SDK next to this \
            executable (seconds), or with --from-source against the SDK's sources (the first \
            build compiles the SDK too, about a minute). With --lang python, DIR/NAME holds \
            NAME.py, the helper eventbus_module.py (standard library only), README.md and \
            sample.yaml: an exec module (docs/modules-any-language.md), nothing to build.
            """
    )

    /// What the module is written in.
    enum Language: String, ExpressibleByArgument, CaseIterable {
        case swift, python
    }

    @Argument(help: "The module's name: lowercase letters and digits, words joined by '-'.")
    var name: String

    @Option(name: .customLong("path"), help: ArgumentHelp("The folder to create the package in.", valueName: "dir"))
    var parent: String = "."

    @OptionGroup var sdk: SDKOptions

    @Flag(name: .customLong("from-source"), help: "Depend on the SDK's sources (--sdk) instead of the prebuilt SDK.")
    var fromSource = false

    @Option(name: .customLong("lang"), help: "swift (a .so built against the SDK) or python (an exec module).")
    var language: Language = .swift

    func validate() throws {
        _ = try ModuleName(name)
    }

    func run() throws {
        let moduleName = try ModuleName(name)
        if language == .python {
            let folder = try PythonModuleScaffold(name: moduleName, helper: try PythonModuleScaffold.locateHelper()).write(into: parent)
            print("""
                Created \(folder) (\(moduleName.name).py and the helper eventbus_module.py).
                Run it:    add the section in \(folder)/sample.yaml to the host's config, then eventbus reload.
                Try it:    eventbus post user.\(moduleName.name).ping who=me; eventbus tail 'user.\(moduleName.name).>'
                """)
            return
        }
        let chosen: ModuleScaffold.SDK
        let origin: String
        if fromSource || sdk.path != nil {
            let location = try sdk.locate()
            (chosen, origin) = (.source(location.path), location.origin)
        } else {
            let prebuilt = try SDKLocator.locatePrebuilt()
            (chosen, origin) = (.prebuilt(prebuilt), prebuilt.origin)
        }
        let scaffold = ModuleScaffold(name: moduleName, sdk: chosen)
        let folder = try scaffold.write(into: parent)
        print("""
            Created \(folder) (target \(moduleName.target), against \(chosen.description), \(origin)).
            Build it:  swift build -c release --package-path \(folder)
            Load it:   add the section in \(folder)/sample.yaml to the host's config.
            """)
    }
}
