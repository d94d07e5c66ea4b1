import Foundation

/// `eventbus module new --lang python NAME`: an exec module in Python
/// (docs/modules-any-language.md) — the program, a copy of the dependency-free helper beside it
/// (so the folder runs as it is, wherever it is copied), a README and the config section.
struct PythonModuleScaffold {
    let name: ModuleName
    /// The helper copied into the folder.
    let helper: String

    /// Where the helper is: from the folder of this executable (symlinks resolved) upwards, the
    /// first `examples/modules/eventbus_module.py` (a source checkout, where the CLI runs from
    /// `.build/…`) or `share/eventbus/python/eventbus_module.py` (an install: the package puts it
    /// in `/usr/share/eventbus/python`).
    static func locateHelper() throws -> String {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var folder = URL(fileURLWithPath: exe).resolvingSymlinksInPath().deletingLastPathComponent()
        while true {
            for candidate in ["examples/modules/eventbus_module.py", "share/eventbus/python/eventbus_module.py"] {
                let url = folder.appendingPathComponent(candidate)
                if FileManager.default.isReadableFile(atPath: url.path) { return url.path }
            }
            let parent = folder.deletingLastPathComponent()
            if parent.path == folder.path { break }
            folder = parent
        }
        throw CommandError("cannot find the Python helper eventbus_module.py: no examples/modules or share/eventbus/python above \(exe)")
    }

    /// Creates `parent/NAME` (not overwriting anything) and returns its absolute path.
    func write(into parent: String) throws -> String {
        let folder = try ModuleScaffold.makeFolder(name.name, in: parent)
        let program = folder.appendingPathComponent(name.name + ".py")
        let helperText: Data
        do {
            helperText = try Data(contentsOf: URL(fileURLWithPath: helper))
        } catch {
            throw CommandError("cannot read the Python helper \(helper): \(error.localizedDescription)")
        }
        try helperText.write(to: folder.appendingPathComponent("eventbus_module.py"))
        try Data(source.utf8).write(to: program)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: program.path)
        try Data(readme.utf8).write(to: folder.appendingPathComponent("README.md"))
        try Data(sampleConfig(program: program.path).utf8).write(to: folder.appendingPathComponent("sample.yaml"))
        return folder.path
    }

    var source: String {
        """
        #!/usr/bin/env python3
        \"\"\"\(name.name): an EventBus handler module in Python (docs/modules-any-language.md).

        eventbusd runs it (the exec: entry in sample.yaml), hands it the events it subscribes to
        on standard input and reads its posts from standard output. Print diagnostics to
        standard error, or use module.log(): eventbusd logs both under the module's name.
        \"\"\"
        import os
        import sys

        # The helper beside this file: standard library only.
        sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
        from eventbus_module import Module  # noqa: E402

        module = Module()  # reads the host's hello: module.name, module.config
        greeting = module.config.get("greeting", "hello")
        module.log("\(name.name) started, greeting %r" % greeting)


        @module.on("user.\(name.name).ping")
        def ping(event):
            # Try it: eventbus post user.\(name.name).ping who=me; eventbus tail 'user.\(name.name).>'
            module.post("user.\(name.name).pong", {"greeting": greeting, "who": event.fields.get("who", "?")})


        @module.on_gap
        def gap(gap):
            module.log("%d event(s) were dropped for this module" % gap.dropped, level="warning")


        module.run()  # until eventbusd closes standard input

        """
    }

    var readme: String {
        """
        # \(name.name)

        An EventBus handler module in Python: `\(name.name).py`, with the helper
        `eventbus_module.py` beside it (standard library only). The protocol and the helper are
        described in docs/modules-any-language.md.

        1. Add the section in `sample.yaml` to the host's config (`/etc/eventbus/eventbus.yaml`) and
           reload: `eventbus reload`. The file and its folders must be owned by root (or the host's
           user) and not writable by others, as for any module.
        2. `eventbus modules` lists it (`exec`), `eventbus tail 'user.\(name.name).>'` shows its posts:
           `eventbus post user.\(name.name).ping who=me`.

        Edit the program and reload: a changed file, `exec:` or `config:` starts it again.

        """
    }

    func sampleConfig(program: String) -> String {
        """
        modules:
          \(name.name):
            exec: ["\(program)"]
            config:
              greeting: hello

        """
    }
}
