import Glibc

extension System {
    /// A user of the system's user database.
    public struct UserAccount: Sendable, Equatable {
        public var uid: UInt32
        /// The user's primary group.
        public var gid: UInt32
    }

    /// User `name` (`getpwnam_r`), or nil when there is none. The reentrant call: `getpwnam`
    /// returns a static buffer that a lookup on another thread overwrites, and rule actions
    /// look users up on several threads at once.
    public static func user(named name: String) -> UserAccount? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var scratch = [CChar](repeating: 0, count: 16_384)
        guard getpwnam_r(name, &entry, &scratch, scratch.count, &result) == 0, result != nil else { return nil }
        return UserAccount(uid: entry.pw_uid, gid: entry.pw_gid)
    }

    /// The id of group `name` (`getgrnam_r`, for the same reason), or nil when there is none.
    public static func groupID(named name: String) -> UInt32? {
        var group = Glibc.group()
        var result: UnsafeMutablePointer<Glibc.group>?
        var scratch = [CChar](repeating: 0, count: 16_384)
        guard getgrnam_r(name, &group, &scratch, scratch.count, &result) == 0, result != nil else { return nil }
        return group.gr_gid
    }
}
