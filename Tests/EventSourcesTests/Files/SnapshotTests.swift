@testable import EventSources
import TestSupport
import Testing

// The file source's snapshot and its keys, without the kernel: paths hashed once (HashedPath),
// and a folder index that stays whole whether a change names its folder (as events do) or lets
// the snapshot find it (scans, rescans).
@Suite struct SnapshotTests {
    @Test func hashedPathsJoinCompareAndFindTheirFolder() {
        let folder = HashedPath("/srv/data")
        let joined = HashedPath(folder, "a.txt")
        #expect(joined == HashedPath("/srv/data/a.txt"))
        #expect(joined.hashValue == HashedPath("/srv/data/a.txt").hashValue)
        #expect(HashedPath(HashedPath("/"), "etc") == HashedPath("/etc"))
        #expect(HashedPath(folder, "é ✓") == HashedPath("/srv/data/é ✓"))

        #expect(joined.folder == folder)
        #expect(HashedPath("/etc").folder == HashedPath("/"))
        #expect(joined.isInFolder(folder))
        #expect(HashedPath("/etc").isInFolder(HashedPath("/")))
        #expect(!joined.isInFolder(HashedPath("/srv/dat")))
        #expect(!joined.isInFolder(HashedPath("/srv")))
        #expect(!HashedPath("/srv/data").isInFolder(folder))
    }

    @Test func invalidUTF8InANameIsRepairedAsStringDecodingDoes() {
        let bytes: [UInt8] = [0x61, 0xFF, 0x62]
        let path = bytes.withUnsafeBytes { HashedPath(HashedPath("/tmp"), $0) }
        let decoded = HashedPath("/tmp/" + String(decoding: bytes, as: UTF8.self))
        #expect(path == decoded)
        // Hashed from the repaired name, as the same path made from a String is.
        #expect(path.hash == decoded.hash)
    }

    /// A path's hash is its folder's and its name's: the same however the path was made — joined
    /// a name at a time, from a String, or moved to another folder by name.
    @Test func aPathsHashIsTheSameHoweverItWasMade() {
        let joined = ["srv", "data", "deep", "dir", "file-1.txt"].reduce(HashedPath("/")) { HashedPath($0, $1) }
        let whole = HashedPath("/srv/data/deep/dir/file-1.txt")
        #expect(joined == whole && joined.hash == whole.hash)
        #expect(HashedPath(HashedPath("/"), "etc").hash == HashedPath("/etc").hash)
        // Different paths, different hashes (the same name in two folders, names split differently).
        let hashes = Set(["/a/bc", "/ab/c", "/abc", "/x/bc", "/a/bc/d"].map { HashedPath($0).hash })
        #expect(hashes.count == 5)

        let moved = whole.named(in: HashedPath("/elsewhere"))
        #expect(moved.path == "/elsewhere/file-1.txt")
        #expect(moved.hash == HashedPath("/elsewhere/file-1.txt").hash)
        #expect(HashedPath("/a/x").named(in: HashedPath("/")) == HashedPath("/x"))
    }

    @Test func changesThatNameTheirFolderIndexLikeThoseThatDoNot() {
        var snapshot = Snapshot()
        let root = HashedPath("/w")
        let sub = HashedPath(root, "sub")
        snapshot.update(.changed(isDirectory: true), at: sub, in: root)
        for index in 0..<10 {
            // Alternate: named folder (an event), found folder (a scan).
            let path = HashedPath(sub, "f\(index)")
            if index % 2 == 0 {
                let marked = snapshot.markChanged(path, isDirectory: false, in: sub)
                #expect(marked)
            } else {
                snapshot["/w/sub/f\(index)"] = .changed(isDirectory: false)
            }
        }
        snapshot["/w/other"] = .changed(isDirectory: false)
        #expect(snapshot.count == 12)
        #expect(Set(snapshot.entries(below: "/w/sub").map(\.path)) == Set((0..<10).map { "/w/sub/f\($0)" }))

        // Already unverified: not newly marked, and not added twice.
        let markedAgain = snapshot.markChanged(HashedPath(sub, "f0"), isDirectory: false, in: sub)
        #expect(!markedAgain)
        #expect(snapshot.count == 12)

        // Removal through either way leaves the index consistent.
        let removedNamed = snapshot.removeValue(forPath: HashedPath(sub, "f0"), in: sub)
        let removedFound = snapshot.removeValue(forPath: "/w/sub/f1")
        let removedAgain = snapshot.removeValue(forPath: "/w/sub/f1")
        #expect(removedNamed != nil && removedFound != nil && removedAgain == nil)
        #expect(snapshot.entries(below: "/w/sub").count == 8)
        #expect(snapshot.count == 10)
    }

    /// Whether a mark is new follows the path through whatever else changes it (removed,
    /// stat'ed, its folder dropped or moved, the snapshot emptied).
    @Test func aMarkSeesEveryOtherChangeToItsPath() {
        var snapshot = Snapshot()
        let folder = HashedPath("/w")
        let file = HashedPath(folder, "f")
        let stated = FileState(isDirectory: false, identity: .init(device: 1, inode: 2, modifiedNanoseconds: 3,
                                                                   changedNanoseconds: 4, size: 5))
        /// Whether marking `file` changed newly marked it.
        func mark() -> Bool { snapshot.markChanged(file, isDirectory: false, in: folder) }

        #expect(mark())
        #expect(!mark())

        snapshot.removeValue(forPath: file, in: folder)
        #expect(mark())
        #expect(snapshot.count == 1)

        snapshot.update(stated, at: file, in: folder)
        #expect(mark())
        #expect(snapshot[file]?.identity == nil)

        snapshot.removeAll(below: folder) { _ in }
        #expect(mark())
        #expect(snapshot.count == 1)

        snapshot.moveAll(below: folder, to: HashedPath("/v")) { _, _, _ in }
        #expect(mark())
        #expect(snapshot.count == 2)

        snapshot.removeAll()
        #expect(mark())
        #expect(snapshot.count == 1)
    }

    @Test func subtreeRemovalAndMoveVisitOnlyTheSubtree() {
        var snapshot = Snapshot()
        let root = HashedPath("/w")
        let a = HashedPath(root, "a"), b = HashedPath(root, "b")
        for folder in [a, b] {
            snapshot.update(.changed(isDirectory: true), at: folder, in: root)
            let inner = HashedPath(folder, "in")
            snapshot.update(.changed(isDirectory: true), at: inner, in: folder)
            for index in 0..<3 {
                snapshot.update(.changed(isDirectory: false), at: HashedPath(folder, "f\(index)"), in: folder)
                snapshot.update(.changed(isDirectory: false), at: HashedPath(inner, "g\(index)"), in: inner)
            }
        }
        #expect(snapshot.count == 16)

        // Rename /w/a → /w/c: its 7 entries move, /w/b's do not.
        let c = HashedPath(root, "c")
        snapshot.update(snapshot.removeValue(forPath: a, in: root)!, at: c, in: root)
        var moved: [String: String] = [:]
        snapshot.moveAll(below: a, to: c) { from, to, _ in moved[from.path] = to.path }
        #expect(moved.count == 7)
        #expect(moved["/w/a/in/g2"] == "/w/c/in/g2")
        #expect(snapshot["/w/a/in/g2"] == nil && snapshot["/w/c/in/g2"] != nil)
        // The moved entries are indexed in their new folders: events naming those folders find them.
        let movedEntry = snapshot.removeValue(forPath: HashedPath(HashedPath(c, "in"), "g1"), in: HashedPath(c, "in"))
        #expect(movedEntry != nil)
        #expect(snapshot.entries(below: "/w/c").count == 6)
        #expect(snapshot.entries(below: "/w/a").isEmpty)

        // Removing /w/b visits its 7 entries only.
        let folderB = snapshot.removeValue(forPath: b, in: root)
        #expect(folderB != nil)
        var removed = 0
        snapshot.removeAll(below: b) { _ in removed += 1 }
        #expect(removed == 7)
        #expect(snapshot.count == 7)  // /w/c and its 6 entries
        #expect(Set(snapshot.map(\.path)) == Set(["/w/c"] + snapshot.entries(below: "/w/c").map(\.path)))
    }
}

/// The snapshot against a plain dictionary of paths, through thousands of seeded random changes:
/// its index (open addressing, removals shifting buckets back, slots reused) and its folder links
/// must agree with the model after every kind of change, at sizes that make the index grow many
/// times and wrap around.
@Suite struct SnapshotModelTests {
    private static func state(_ random: inout SplitMix, isDirectory: Bool) -> FileState {
        guard Bool.random(using: &random) else { return .changed(isDirectory: isDirectory) }
        let inode = UInt64.random(in: 1...1_000_000, using: &random)
        return FileState(isDirectory: isDirectory, identity: .init(device: 1, inode: inode, modifiedNanoseconds: 2,
                                                                   changedNanoseconds: 3, size: 4))
    }

    private static func same(_ a: FileState?, _ b: FileState?) -> Bool {
        a?.isDirectory == b?.isDirectory && a?.identity == b?.identity
    }

    /// One folder of 100k paths, as a storm makes: ~1 560 a shard, past the first chunk of
    /// entries (``SnapshotShard/chunkSize``); freed slots in every chunk are found and reused.
    @Test func aFolderOfAHundredThousandPathsSpansChunksAndReusesFreedSlots() {
        var snapshot = Snapshot()
        let folder = HashedPath("/storm")
        let count = 100_000
        #expect(count / SnapshotShard.count > SnapshotShard.chunkSize)
        for index in 0..<count {
            snapshot.update(.changed(isDirectory: false), at: HashedPath(folder, "f\(index)"), in: folder)
        }
        for index in stride(from: 0, to: count, by: 3) {
            #expect(snapshot.removeValue(forPath: HashedPath(folder, "f\(index)"), in: folder) != nil)
        }
        let removed = (count + 2) / 3
        for index in 0..<removed {
            snapshot.update(.changed(isDirectory: true), at: HashedPath(folder, "g\(index)"), in: folder)
        }
        #expect(snapshot.count == count)
        #expect(snapshot.reduce(0) { total, _ in total + 1 } == count)
        #expect((0..<count).allSatisfy { index in (snapshot["/storm/f\(index)"] == nil) == (index % 3 == 0) })
        #expect((0..<removed).allSatisfy { snapshot["/storm/g\($0)"]?.isDirectory == true })
        var visited = 0
        snapshot.removeAll(below: folder) { _ in visited += 1 }
        #expect(visited == count && snapshot.count == 0)
    }

    @Test(arguments: [1, 2, 3] as [UInt64])
    func randomChangesLeaveTheSnapshotEqualToAPlainDictionary(seed: UInt64) {
        var random = SplitMix(seed: seed)
        var snapshot = Snapshot()
        var model: [String: FileState] = [:]
        // Directories two levels deep below /w, known to the snapshot before anything in them (as
        // a watched tree's are); files named from a small set so that paths recur.
        let directories = (0..<6).flatMap { d in ["/w/d\(d)"] + (0..<3).map { "/w/d\(d)/e\($0)" } }
        func addDirectories(below folder: String) {
            for directory in directories where directory.hasPrefix(folder + "/") {
                snapshot.update(.changed(isDirectory: true), at: HashedPath(directory))
                model[directory] = .changed(isDirectory: true)
            }
        }
        addDirectories(below: "/w")
        func below(_ folder: String) -> [String] { model.keys.filter { $0.hasPrefix(folder + "/") } }

        var largest = 0
        for step in 0..<20_000 {
            let folder = (["/w"] + directories).randomElement(using: &random)!
            let name = "f\(Int.random(in: 0..<400, using: &random))"
            let path = folder + "/" + name
            let named = Bool.random(using: &random)  // the folder named (an event), or found (a scan)
            switch Int.random(in: 0..<100, using: &random) {
            case 0..<50:
                let state = Self.state(&random, isDirectory: false)
                let old = named
                    ? snapshot.update(state, at: HashedPath(HashedPath(folder), name), in: HashedPath(folder))
                    : snapshot.update(state, at: HashedPath(path))
                #expect(Self.same(old, model[path]), "step \(step): update \(path)")
                model[path] = state
            case 50..<65:
                let wasVerifiedOrNew = snapshot.markChanged(HashedPath(path), isDirectory: false, in: named ? HashedPath(folder) : nil)
                #expect(wasVerifiedOrNew == (model[path].map { $0.identity != nil } ?? true), "step \(step): mark \(path)")
                if model[path] == nil { model[path] = .changed(isDirectory: false) } else { model[path]!.identity = nil }
            case 65..<90:
                let removed = named
                    ? snapshot.removeValue(forPath: HashedPath(path), in: HashedPath(folder))
                    : snapshot.removeValue(forPath: path)
                #expect(Self.same(removed, model.removeValue(forKey: path)), "step \(step): remove \(path)")
            case 90 where folder != "/w":
                var visited: Set<String> = []
                snapshot.removeAll(below: HashedPath(folder)) { visited.insert($0.path) }
                let expected = below(folder)
                #expect(visited == Set(expected), "step \(step): remove below \(folder)")
                for gone in expected { model[gone] = nil }
                addDirectories(below: folder)
            case 91..<93:
                // A folder's subtree moved to a name that holds nothing, and back.
                let target = "/w/moved\(step)"
                var moved: [String: String] = [:]
                snapshot.moveAll(below: HashedPath(folder), to: HashedPath(target)) { from, to, _ in moved[from.path] = to.path }
                let expected = below(folder)
                #expect(Set(moved.keys) == Set(expected), "step \(step): move below \(folder)")
                for old in expected {
                    let new = target + old.dropFirst(folder.count)
                    #expect(moved[old] == new)
                    model[new] = model.removeValue(forKey: old)
                }
                #expect(Set(snapshot.entries(below: target).map(\.path)) == Set(below(target)), "step \(step)")
                snapshot.moveAll(below: HashedPath(target), to: HashedPath(folder)) { _, _, _ in }
                for new in below(target) { model[folder + new.dropFirst(target.count)] = model.removeValue(forKey: new) }
            default:
                #expect(Set(snapshot.entries(below: folder).map(\.path)) == Set(below(folder)), "step \(step): entries below \(folder)")
            }
            #expect(snapshot.count == model.count, "step \(step)")
            largest = max(largest, model.count)
        }
        #expect(Set(snapshot.map(\.path)) == Set(model.keys))
        for (path, state) in model { #expect(Self.same(snapshot[path], state), "\(path)") }
        #expect(largest > 1_000)  // ~25 paths a shard: every index grew from 16 buckets to 64
    }
}
