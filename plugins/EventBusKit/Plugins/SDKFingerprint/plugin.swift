import PackagePlugin

/// Generates `ModuleABI.interfaceFingerprint` for the EventBusKit target from its own sources and
/// the package manifest (see `Sources/SDKFingerprintTool/main.swift` for what is hashed).
///
/// A build command, not a pre-build one: it runs the tool built from this package, and SwiftPM
/// reruns it exactly when one of the listed inputs changes — adding or removing a source file
/// changes the list, which reruns it too.
@main
struct SDKFingerprint: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) async throws -> [Command] {
        guard let target = target as? SourceModuleTarget else { return [] }
        let sources = target.sourceFiles(withSuffix: "swift").map(\.url)
        let inputs = sources + [context.package.directoryURL.appending(path: "Package.swift")]
        let output = context.pluginWorkDirectoryURL.appending(path: "SDKFingerprint.swift")
        let tool = try context.tool(named: "SDKFingerprintTool")
        return [.buildCommand(
            displayName: "Fingerprinting the \(target.name) sources",
            executable: tool.url,
            arguments: [output.path, context.package.directoryURL.path] + inputs.map(\.path),
            inputFiles: inputs,
            outputFiles: [output])]
    }
}
