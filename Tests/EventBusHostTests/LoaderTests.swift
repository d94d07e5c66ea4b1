import EventBusHost
import EventBusKit
import Foundation
import ModuleLoading
import Testing

/// The loader refuses everything that is not a module built for this host, saying what it is.
@Suite struct LoaderTests {
    func refusal(_ path: String) -> ModuleLoadError? {
        do {
            let library = try ModuleLoader().load(path)
            Issue.record("\(path) loaded as \(library.resolvedPath)")
            return nil
        } catch {
            #expect(error.path == path)
            #expect(error.description.hasPrefix("cannot load module \(path): "))
            return error
        }
    }

    @Test func aMissingFile() throws {
        let directory = try TemporaryDirectory()
        let error = refusal(directory.path + "/libNope.so")
        #expect(error?.kind == .fileMissing)
        #expect(error?.message == "no such file")
    }

    @Test func aTextFileIsNotAnELF() throws {
        let directory = try TemporaryDirectory()
        let error = refusal(try directory.write("libText.so", "#!/bin/sh\necho not a module\n"))
        #expect(error?.kind == .notELF)
        #expect(error?.message.contains("not an ELF shared object") == true)
    }

    @Test func aSharedObjectWithoutTheEntrySymbol() throws {
        let libz = "/lib/x86_64-linux-gnu/libz.so.1"
        try #require(FileManager.default.fileExists(atPath: libz))
        let error = refusal(libz)
        #expect(error?.kind == .missingEntry)
        #expect(error?.message.contains("no \(moduleEntrySymbol) symbol: not an EventBus module") == true)
    }

    @Test func anExecutableIsRefusedBeforeDlopen() throws {
        // An executable is ELF (a PIE is even ET_DYN) but not a library; the preflight says so.
        let error = refusal(BuildProducts.eventbusd)
        #expect(error?.kind == .notSharedLibrary)
        #expect(error?.message.contains("a position-independent executable, not a shared library") == true)
    }

    @Test func aModuleBuiltForAnotherABI() {
        let error = refusal(BuildProducts.fixture("FixtureABIMismatch"))
        #expect(error?.kind == .abiMismatch)
        #expect(error?.message.contains("built with another EventBusKit interface and another compiler: the module was built with EventBusKit (release not recorded) (interface eventbuskit-abi-0) and swift-5.9, this host runs EventBusKit \(ModuleABI.release) (interface \(ModuleABI.interfaceFingerprint)) and swift-") == true)
    }

    @Test func aModuleLoadsOnceAndIsRemembered() throws {
        let loader = ModuleLoader()
        let path = BuildProducts.fixture("FixtureCounter")
        let first = try loader.load(path)
        // Through a symbolic link: the same file, so the same library.
        let directory = try TemporaryDirectory()
        try FileManager.default.createSymbolicLink(atPath: directory.path + "/link.so", withDestinationPath: path)
        let second = try loader.load(directory.path + "/link.so")
        #expect(first.resolvedPath == second.resolvedPath)
        #expect(!second.changedOnDisk)
    }
}
